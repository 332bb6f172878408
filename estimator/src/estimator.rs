//! The Estimator: `train`, `evaluate`, `predict` over a model function and a RunConfig.

use crate::{
    EstimatorError, InputFn, Mode, ModelFn, Params, Result,
    checkpoint::{Checkpoint, CheckpointManager, RetentionPolicy, read_checkpoint},
    eval_summaries::EvalSummaries,
    hooks::{
        CheckpointSaverHook, CheckpointSaverListener, FaultInjectionHook, LoggingTensorHook, NanTensorHook,
        ProgressBarHook, SessionRunHook, SharedSummaryWriter, StepCounterHook, StopAtStepHook, SummarySaverHook,
    },
    input::{Dataset, IteratorState},
    model_dir::ModelDir,
    run_config::RunConfig,
    session::{
        EvalHooks, EvalOutcome, Predictions, Replicas, TrainOutcome, TrainingSession, compile, evaluate_dataset,
    },
    strategy::Strategy,
    summary::{HParam, SummaryWriter},
    warm_start::WarmStartSettings,
};
use engine_graph::HostTensor;
use engine_runtime::cluster::TaskType;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

/// How far `train` goes: `Steps` more than the checkpoint, or up to `MaxSteps` in total
/// (TensorFlow's `steps` and `max_steps`), or until the input ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepLimit {
    Steps(u64),
    MaxSteps(u64),
    UntilInputEnds,
}

/// The result of `evaluate`: every metric, `loss` and `global_step`.
pub type EvalResult = BTreeMap<String, f64>;

pub struct Estimator {
    pub(crate) model_fn: Arc<dyn ModelFn>,
    config: RunConfig,
    pub(crate) params: Params,
    warm_start: Option<WarmStartSettings>,
    model_dir: ModelDir,
    checkpoints: CheckpointManager,
    seed: u64,
    train_strategy: Arc<dyn Strategy>,
    eval_strategy: Arc<dyn Strategy>,
    /// Written for TensorBoard's HParams dashboard when training starts.
    hparams: BTreeMap<String, HParam>,
    eval_summaries: EvalSummaries,
}

impl Estimator {
    pub fn new(model_fn: impl ModelFn + 'static, config: RunConfig) -> Result<Self> {
        config.validate()?;
        let model_dir = ModelDir::open_with(&config.model_dir, config.s3.as_ref())?;
        let policy = RetentionPolicy {
            keep_checkpoint_max: config.keep_checkpoint_max,
            keep_checkpoint_every_n_hours: Some(config.keep_checkpoint_every_n_hours),
        };
        let checkpoints = CheckpointManager::with_policy(model_dir.clone(), policy);
        let seed = config.seed();
        if config.random_seed.is_none() {
            log::info!("No random_seed set; using {seed}");
        }
        let train_strategy: Arc<dyn Strategy> = config.strategy_for(Mode::Train).build(&config.strategy)?.into();
        let eval_strategy: Arc<dyn Strategy> = config.strategy_for(Mode::Eval).build(&config.strategy)?.into();
        log::info!("Using config: {config}");
        Ok(Estimator {
            model_fn: Arc::new(model_fn),
            config,
            params: Params::Null,
            warm_start: None,
            hparams: BTreeMap::new(),
            eval_summaries: EvalSummaries::new(model_dir.clone()),
            model_dir,
            checkpoints,
            seed,
            train_strategy,
            eval_strategy,
        })
    }

    pub fn with_params(mut self, params: Params) -> Self {
        self.params = params;
        self
    }

    /// The run's hyperparameters (optimizer, learning rate, batch …) for TensorBoard's
    /// HParams dashboard, written beside the graph when training starts; the strategy and
    /// the random seed are added from the run config.
    pub fn with_hparams(mut self, hparams: BTreeMap<String, HParam>) -> Self {
        self.hparams = hparams;
        self
    }

    pub fn with_warm_start(mut self, settings: WarmStartSettings) -> Self {
        self.warm_start = Some(settings);
        self
    }

    /// Replaces the strategies chosen by name (for strategies built in code, such as a
    /// multi-worker strategy resolved from a cluster).
    pub fn with_strategies(mut self, train: Arc<dyn Strategy>, eval: Arc<dyn Strategy>) -> Self {
        self.train_strategy = train;
        self.eval_strategy = eval;
        self
    }

    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    pub fn model_dir(&self) -> &ModelDir {
        &self.model_dir
    }

    pub fn checkpoints(&self) -> &CheckpointManager {
        &self.checkpoints
    }

    pub fn train_strategy(&self) -> &Arc<dyn Strategy> {
        &self.train_strategy
    }

    pub fn latest_checkpoint(&self) -> Result<Option<String>> {
        Ok(self.checkpoints.latest()?.map(|c| c.path))
    }

    pub fn get_variable_names(&self) -> Result<Vec<String>> {
        let restored =
            self.checkpoints.restore_latest_valid()?.ok_or(EstimatorError::NoCheckpoint("read variables from"))?;
        Ok(restored.checkpoint.tensors.keys().cloned().collect())
    }

    pub fn get_variable_value(&self, name: &str) -> Result<HostTensor> {
        let restored =
            self.checkpoints.restore_latest_valid()?.ok_or(EstimatorError::NoCheckpoint("read variables from"))?;
        restored.checkpoint.tensors.get(name).cloned().ok_or_else(|| EstimatorError::UnknownVariable(name.to_string()))
    }

    /// The checkpoint at `path`, or the latest valid one of the model directory.
    pub(crate) fn checkpoint_for(&self, path: Option<&str>, what: &'static str) -> Result<Checkpoint> {
        Ok(match path {
            Some(p) => read_checkpoint(p, self.config.s3.as_ref())?,
            None => self.checkpoints.restore_latest_valid()?.ok_or(EstimatorError::NoCheckpoint(what))?.checkpoint,
        })
    }

    fn dataset(&self, input_fn: &dyn InputFn, mode: Mode, strategy: &dyn Strategy) -> Result<Dataset> {
        Ok(input_fn.dataset(mode, &strategy.input_context())?)
    }

    /// Trains until `limit`. Resumes from the latest valid checkpoint (variables, optimizer
    /// slots, global step and input position); skips when it is already at `MaxSteps`.
    pub fn train(
        &self,
        input_fn: &dyn InputFn,
        hooks: Vec<Box<dyn SessionRunHook>>,
        limit: StepLimit,
        saving_listeners: Vec<Box<dyn CheckpointSaverListener + '_>>,
    ) -> Result<TrainOutcome> {
        self.train_with(input_fn, hooks, limit, saving_listeners, self.config.checkpoint_trigger())
    }

    pub(crate) fn train_with<'l>(
        &self,
        input_fn: &dyn InputFn,
        hooks: Vec<Box<dyn SessionRunHook>>,
        limit: StepLimit,
        saving_listeners: Vec<Box<dyn CheckpointSaverListener + 'l>>,
        trigger: crate::CheckpointTrigger,
    ) -> Result<TrainOutcome> {
        if self.train_strategy.cluster().is_some_and(|c| c.task().task_type == TaskType::Ps) {
            return self.serve_parameters(input_fn, &hooks);
        }
        // One writer per model dir, for as long as this training runs (see `WriterLock`).
        let _writer = match self.train_strategy.is_chief() {
            true => Some(crate::checkpoint::WriterLock::acquire(&self.model_dir, &command_line(), WRITER_LEASE)?),
            false => None,
        };
        if self.train_strategy.is_chief() {
            for path in self.checkpoints.remove_interrupted_saves()? {
                log::info!("Removed {}, left by a save that was interrupted", path.display());
            }
        }
        let restored = self.checkpoints.restore_latest_valid()?;
        if let Some(r) = restored.as_ref().filter(|r| !r.skipped.is_empty()) {
            for skipped in &r.skipped {
                log::warn!("Damage in the model dir: {skipped}");
            }
            log::warn!(
                "Resuming from {}, the newest checkpoint that loads; the next save repairs the state file",
                r.checkpoint.path
            );
        }
        let start = restored.as_ref().map(|r| r.checkpoint.step).unwrap_or(0);
        let last_step = match limit {
            StepLimit::Steps(n) => Some(start + n),
            StepLimit::MaxSteps(m) => Some(m),
            StepLimit::UntilInputEnds => None,
        };
        if let Some(last) = last_step
            && start >= last
        {
            log::info!("Skipping training since max_steps has already saved.");
            return Ok(TrainOutcome { global_step: start, loss: None });
        }
        let strategy = self.train_strategy.clone();
        let dataset = self.dataset(input_fn, Mode::Train, strategy.as_ref())?;
        let schema = dataset.schema()?;
        let mut user_hooks = hooks;
        let required: Vec<String> = user_hooks.iter().flat_map(|h| h.required_tensors()).collect();
        let mut compiled =
            compile(self.model_fn.as_ref(), &self.params, Mode::Train, &schema, strategy.as_ref(), &required)?;
        self.check_memory(&compiled, &dataset, strategy.as_ref())?;
        let mut replicas = Replicas::new(&compiled, strategy.as_ref(), self.config.precision)?;
        let input = match &restored {
            Some(r) => {
                let loaded = replicas.restore(&r.checkpoint.tensors, self.seed)?;
                log::info!("Restoring parameters from {} ({} variables)", r.checkpoint.path, loaded.len());
                if r.checkpoint.meta.fingerprint != compiled.fingerprint {
                    log::warn!(
                        "checkpoint {} was written by a graph with fingerprint {}, this one is {}; restored by name",
                        r.checkpoint.path,
                        r.checkpoint.meta.fingerprint,
                        compiled.fingerprint
                    );
                }
                resume_input(&dataset, &r.checkpoint, strategy.as_ref(), replicas.len() as u64)?
            }
            None => {
                replicas.initialize(self.seed)?;
                if let Some(ws) = &self.warm_start {
                    let values = ws.select(&read_checkpoint(&ws.checkpoint, self.config.s3.as_ref())?.tensors)?;
                    let loaded = replicas.restore(&values, self.seed)?;
                    log::info!("Warm-started {} variables from {}", loaded.len(), ws.checkpoint);
                }
                dataset.iter()?
            }
        };
        let mut start = start;
        if strategy.cluster().is_some() {
            replicas.sync_from_chief(start, self.seed)?;
            if let Some(step) = replicas.remote_global_step() {
                start = step;
            }
        }
        let global_batch = schema_batch(&dataset) * strategy.num_replicas_in_sync();
        let examples_seen = match &restored {
            Some(r) => r.checkpoint.meta.examples_seen.unwrap_or(start * global_batch as u64),
            None => 0,
        };
        let is_chief = strategy.is_chief();
        let summary: Option<SharedSummaryWriter> = if is_chief && self.config.save_summary_steps > 0 {
            let mut writer = SummaryWriter::new(&self.model_dir, "")?;
            writer.graph(start, &compiled.plan.graph)?;
            let mut hparams = self.hparams.clone();
            hparams.insert("strategy".into(), HParam::Text(strategy.name().to_string()));
            hparams.insert("random_seed".into(), HParam::Number(self.seed as f64));
            writer.hparams(&hparams)?;
            Some(Arc::new(Mutex::new(writer)))
        } else {
            None
        };
        let mut all_hooks: Vec<Box<dyn SessionRunHook + 'l>> = vec![
            Box::new(NanTensorHook::default()),
            Box::new(LoggingTensorHook::new(&["loss", "global_step"], self.config.log_step_count_steps)),
        ];
        // A testing aid, armed only by its environment variable: it exits before any other
        // hook sees the step it fires at.
        if let Some(fault) = FaultInjectionHook::from_env(strategy.cluster())? {
            all_hooks.insert(0, Box::new(fault));
        }
        if let Some(last) = last_step {
            all_hooks.push(Box::new(StopAtStepHook::at(last)));
        }
        all_hooks.extend(compiled.spec_hooks.drain(..));
        if is_chief {
            all_hooks.extend(compiled.spec_chief_hooks.drain(..));
            // A step counter or summary saver the spec or the caller configures replaces
            // the default one: two would write every scalar twice.
            let given =
                |name: &str| all_hooks.iter().any(|h| h.name() == name) || user_hooks.iter().any(|h| h.name() == name);
            let (counter, saver) = (given("StepCounterHook"), given("SummarySaverHook"));
            if !given("ProgressBarHook") {
                all_hooks.push(Box::new(ProgressBarHook::new(last_step)));
            }
            if !counter {
                all_hooks.push(Box::new(StepCounterHook::new(self.config.log_step_count_steps)));
            }
            if self.config.save_summary_steps > 0 && !saver {
                all_hooks.push(Box::new(SummarySaverHook::new(self.config.save_summary_steps, false)));
            }
        }
        all_hooks.extend(user_hooks.drain(..));
        // The saver runs last so that a checkpoint includes what other hooks did.
        if is_chief {
            all_hooks.push(Box::new(CheckpointSaverHook::new(trigger, saving_listeners)));
        }
        let mut session = TrainingSession {
            compiled: &compiled,
            replicas,
            input,
            global_step: start,
            model_dir: &self.model_dir,
            checkpoints: &self.checkpoints,
            summary,
            is_chief,
            global_batch_size: global_batch,
            non_finite: self.config.non_finite,
            in_cluster: strategy.cluster().is_some(),
            preempted: None,
            examples_seen,
        };
        let outcome = session.run(&mut all_hooks)?;
        // Every task of a cluster ends the same step; the chief arrives after its final
        // checkpoint, so no task exits while another still needs it.
        if strategy.cluster().is_some() {
            session.replicas.barrier()?;
        }
        if let Some(signal) = session.preempted {
            return Err(EstimatorError::Preempted { signal, step: Some(outcome.global_step) });
        }
        if let Some(loss) = outcome.loss {
            log::info!("Loss for final step: {loss:.7}.");
        }
        Ok(outcome)
    }

    /// A ps task's part of training: compile the training graph exactly as the training
    /// tasks do (their handshake compares its fingerprint), then serve this task's share of
    /// the variables until training ends.
    fn serve_parameters(&self, input_fn: &dyn InputFn, hooks: &[Box<dyn SessionRunHook>]) -> Result<TrainOutcome> {
        let strategy = self.train_strategy.clone();
        let dataset = self.dataset(input_fn, Mode::Train, strategy.as_ref())?;
        let schema = dataset.schema()?;
        let required: Vec<String> = hooks.iter().flat_map(|h| h.required_tensors()).collect();
        let compiled =
            compile(self.model_fn.as_ref(), &self.params, Mode::Train, &schema, strategy.as_ref(), &required)?;
        let step =
            strategy.serve_parameters(compiled.plan.clone(), &compiled.handshake_fingerprint, self.config.precision)?;
        Ok(TrainOutcome { global_step: step.unwrap_or(0), loss: None })
    }

    /// Evaluates a checkpoint (the latest by default) on one pass of the input (or `steps`
    /// batches), writes the results to `eval/` (or `eval_<name>/`) and returns every
    /// metric with `loss` and `global_step`.
    pub fn evaluate(
        &self,
        input_fn: &dyn InputFn,
        steps: Option<u64>,
        hooks: Vec<Box<dyn SessionRunHook>>,
        checkpoint_path: Option<&str>,
        name: Option<&str>,
    ) -> Result<EvalResult> {
        let checkpoint = match checkpoint_path {
            Some(p) => read_checkpoint(p, self.config.s3.as_ref())?,
            None => {
                self.checkpoints.restore_latest_valid()?.ok_or(EstimatorError::NoCheckpoint("evaluate"))?.checkpoint
            }
        };
        self.evaluator(input_fn, steps, hooks, name)?.evaluate(&checkpoint)
    }

    /// An evaluator compiled once, for evaluating checkpoint after checkpoint.
    pub fn evaluator(
        &self,
        input_fn: &dyn InputFn,
        steps: Option<u64>,
        hooks: Vec<Box<dyn SessionRunHook>>,
        name: Option<&str>,
    ) -> Result<Evaluator<'_>> {
        let strategy = self.eval_strategy.clone();
        let dataset = self.dataset(input_fn, Mode::Eval, strategy.as_ref())?;
        let schema = dataset.schema()?;
        let required: Vec<String> = hooks.iter().flat_map(|h| h.required_tensors()).collect();
        let mut compiled =
            compile(self.model_fn.as_ref(), &self.params, Mode::Eval, &schema, strategy.as_ref(), &required)?;
        self.check_memory(&compiled, &dataset, strategy.as_ref())?;
        let replicas = Replicas::new(&compiled, strategy.as_ref(), self.config.precision)?;
        // The model_fn's evaluation_hooks run first, then the caller's (TensorFlow's order).
        let mut all_hooks = std::mem::take(&mut compiled.spec_hooks);
        all_hooks.extend(hooks);
        let global_batch_size = schema_batch(&dataset) * strategy.num_replicas_in_sync();
        let is_chief = strategy.is_chief();
        Ok(Evaluator {
            estimator: self,
            compiled,
            replicas,
            dataset,
            steps,
            name: name.map(str::to_string),
            hooks: all_hooks,
            global_batch_size,
            is_chief,
        })
    }

    /// Refuses a graph whose batches would not fit in this machine's memory.
    fn check_memory(
        &self,
        compiled: &crate::session::Compiled,
        dataset: &Dataset,
        strategy: &dyn Strategy,
    ) -> Result<()> {
        crate::check_model_memory(
            &compiled.plan,
            schema_batch(dataset),
            strategy.local_devices().len(),
            &crate::Resources::of_this_machine(),
        )
    }

    /// Logs, writes summaries for, and returns an evaluation outcome.
    pub(crate) fn report(&self, outcome: &EvalOutcome, step: u64, name: Option<&str>) -> Result<EvalResult> {
        let mut result: EvalResult = outcome.metrics.clone();
        result.insert("loss".into(), outcome.loss);
        result.insert("global_step".into(), step as f64);
        let line: Vec<String> = result
            .iter()
            .map(|(k, v)| if k == "global_step" { format!("{k} = {step}") } else { format!("{k} = {v:.7}") })
            .collect();
        log::info!("Saving dict for global step {step}: {}", line.join(", "));
        if self.train_strategy.is_chief() || self.eval_strategy.is_chief() {
            let dir = match name {
                Some(n) => format!("eval_{n}"),
                None => "eval".to_string(),
            };
            let values: Vec<(&str, f64)> =
                result.iter().filter(|(k, _)| *k != "global_step").map(|(k, v)| (k.as_str(), *v)).collect();
            let written = self.eval_summaries.write(&dir, step, &values)?;
            if written != dir {
                log::info!(
                    "Step {step} is behind the evaluation curve in {dir}/: its summaries go to {written}/ (a run of \
                     their own in TensorBoard)"
                );
            }
        }
        Ok(result)
    }

    /// Predictions for every example of the input, one map per example, from a checkpoint
    /// (the latest by default). `predict_keys` selects outputs (all when `None`).
    pub fn predict(
        &self,
        input_fn: &dyn InputFn,
        predict_keys: Option<Vec<String>>,
        checkpoint_path: Option<&str>,
    ) -> Result<Predictions> {
        let strategy = self.config.strategy_for(Mode::Predict).build(&self.config.strategy)?;
        let checkpoint = self.checkpoint_for(checkpoint_path, "predict from")?;
        let dataset = self.dataset(input_fn, Mode::Predict, strategy.as_ref())?;
        let schema = dataset.schema()?;
        let compiled = compile(self.model_fn.as_ref(), &self.params, Mode::Predict, &schema, strategy.as_ref(), &[])?;
        self.check_memory(&compiled, &dataset, strategy.as_ref())?;
        let mut replicas = Replicas::new(&compiled, strategy.as_ref(), self.config.precision)?;
        replicas.restore(&checkpoint.tensors, self.seed)?;
        let keys = match predict_keys {
            Some(k) => k,
            None => compiled.predictions.keys().cloned().collect(),
        };
        for k in &keys {
            if !compiled.predictions.contains_key(k) {
                let known: Vec<&str> = compiled.predictions.keys().map(String::as_str).collect();
                return Err(EstimatorError::Other(format!(
                    "unknown prediction key '{k}'; the model predicts: {}",
                    known.join(", ")
                )));
            }
        }
        Ok(Predictions { input: dataset.iter()?, compiled, replicas, keys, buffer: VecDeque::new() })
    }
}

/// Evaluates checkpoints with one compiled eval graph.
pub struct Evaluator<'e> {
    estimator: &'e Estimator,
    compiled: crate::session::Compiled,
    replicas: Replicas,
    dataset: Dataset,
    steps: Option<u64>,
    name: Option<String>,
    hooks: Vec<Box<dyn SessionRunHook>>,
    global_batch_size: usize,
    is_chief: bool,
}

impl Evaluator<'_> {
    pub fn evaluate(&mut self, checkpoint: &Checkpoint) -> Result<EvalResult> {
        self.replicas.restore(&checkpoint.tensors, self.estimator.seed)?;
        let step = checkpoint.step;
        log::info!("Starting evaluation of {} at step {step}", checkpoint.path);
        let started = std::time::Instant::now();
        let iter = self.dataset.iter()?;
        let finder = iter.non_finite_finder();
        let batches = iter.map(|b| b.map_err(Into::into));
        let mut hooks = EvalHooks {
            hooks: &mut self.hooks,
            checkpoint,
            fingerprint: &self.compiled.fingerprint,
            model_dir: &self.estimator.model_dir,
            checkpoints: &self.estimator.checkpoints,
            global_batch_size: self.global_batch_size,
            is_chief: self.is_chief,
            stop: Default::default(),
        };
        hooks.start()?;
        let outcome =
            evaluate_dataset(&self.compiled, &mut self.replicas, batches, self.steps, &mut hooks, Some(&finder))?;
        hooks.end()?;
        log::info!(
            "Finished evaluation of {} batches ({} examples) in {:.2} s",
            outcome.batches,
            outcome.examples,
            started.elapsed().as_secs_f64()
        );
        self.estimator.report(&outcome, step, self.name.as_deref())
    }

    /// The directory (under the model dir) evaluation summaries go to.
    pub fn eval_dir(&self) -> String {
        match &self.name {
            Some(n) => format!("eval_{n}"),
            None => "eval".into(),
        }
    }
}

/// Where this process's input pipeline resumes after `checkpoint`: exactly where it was, when
/// the checkpoint recorded this pipeline's position for this very dataset; else (another
/// worker's shard, or a pipeline that changed since: its batch size, shuffle buffer, files
/// or the strategy's replica count) after as many examples as the job had read, replayed in
/// the new pipeline's order. TensorFlow restarts its input in the second case; the warning
/// says what happened.
fn resume_input(
    dataset: &Dataset,
    checkpoint: &Checkpoint,
    strategy: &dyn Strategy,
    local_replicas: u64,
) -> Result<crate::input::DatasetIter> {
    let context = strategy.input_context();
    let global_batch = (schema_batch(dataset) * strategy.num_replicas_in_sync()).max(1) as u64;
    let examples = checkpoint.meta.examples_seen.unwrap_or(checkpoint.step * global_batch);
    let replay = || dataset.iter_after(examples / global_batch * local_replicas);
    let why = match IteratorState::from_json(&checkpoint.meta.input_state) {
        Ok(state)
            if state.shard_index == context.input_pipeline_id && state.num_shards == context.num_input_pipelines =>
        {
            match dataset.iter_from(&state) {
                Ok(iter) => return Ok(iter),
                Err(crate::input::InputError::State(_)) => {
                    "its source, batch size, shuffle buffer, maps or filters changed".to_string()
                }
                Err(e) => return Err(e.into()),
            }
        }
        // The chief records its own pipeline's position; another worker's shard is at the
        // same step, which a replay from its start reaches exactly.
        Ok(state) if state.num_shards == context.num_input_pipelines => return Ok(replay()?),
        Ok(state) => format!("{} input pipelines then, {} now", state.num_shards, context.num_input_pipelines),
        Err(e) => e.to_string(),
    };
    log::warn!(
        "The input pipeline is not the one {} was saved with ({why}): continuing after example {examples}, \
         in the new pipeline's order (TensorFlow would restart the input)",
        checkpoint.path
    );
    Ok(replay()?)
}

/// The per-replica batch size of a training dataset (its first batch's rows).
fn schema_batch(dataset: &Dataset) -> usize {
    dataset.batch_size().unwrap_or(1)
}

/// How long the chief's writer lease lives without a renewal (renewed every third of it),
/// for a holder on another host; on the same host a dead holder is seen at once.
const WRITER_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// This process as a user would recognize it: `engine run specs/x.ron --strategy mirrored`.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().collect();
    let mut text = args.join(" ");
    if let Some(first) = args.first()
        && let Some(base) = std::path::Path::new(first).file_name().and_then(|b| b.to_str())
    {
        text = text.replacen(first.as_str(), base, 1);
    }
    text.chars().take(200).collect()
}
