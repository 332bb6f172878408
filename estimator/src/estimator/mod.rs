//! The Estimator: `train`, `evaluate`, `predict` over a model function and a RunConfig.

mod training;

use training::schema_batch;

use crate::{
    EstimatorError, InputFn, Mode, ModelFn, Params, Result,
    checkpoint::{Checkpoint, CheckpointManager, RetentionPolicy, read_checkpoint},
    eval_summaries::EvalSummaries,
    hooks::{CheckpointSaverListener, SessionRunHook},
    input::Dataset,
    model_dir::ModelDir,
    run_config::RunConfig,
    session::{EvalHooks, EvalOutcome, Predictions, Replicas, TrainOutcome, compile, evaluate_dataset},
    strategy::Strategy,
    summary::HParam,
    warm_start::WarmStartSettings,
};
use engine_graph::HostTensor;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

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

/// Confusion matrices by metric name: row = the label's class, column = the predicted class.
pub type ConfusionMatrices = BTreeMap<String, Vec<Vec<u64>>>;

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
        // Before anything starts rayon's pool with one thread per CPU.
        engine_runtime::use_compute_threads();
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

    /// A checkpoint whose variables do not fit this model (a model dir another model trained
    /// in) is named, with the ways out; other errors pass through.
    pub(crate) fn restore_error(&self, e: EstimatorError, what: &str, checkpoint: &str) -> EstimatorError {
        match e {
            EstimatorError::Runtime(engine_runtime::RuntimeError::Variable { name, reason }) => {
                EstimatorError::Config(format!(
                    "cannot {what} {checkpoint} in {}: variable {name}: {reason}. The model dir holds another \
                     model's checkpoints: train this one in a new directory (--model-dir DIR), or start it from that \
                     checkpoint's matching variables with warm_start_from",
                    self.model_dir
                ))
            }
            other => other,
        }
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
        let dataset = input_fn.dataset(mode, &strategy.input_context())?;
        match (mode, strategy.elastic_membership(), strategy.elastic_rules()) {
            (Mode::Train, Some(membership), Some(rules)) => {
                elastic_share(dataset, membership.size(), rules.min..=rules.max)
            }
            _ => Ok(dataset),
        }
    }

    /// Global steps in one pass over `input_fn`'s data as the training strategy shards it
    /// (each step takes a batch on every replica; the remainder that fills no step on every
    /// replica is dropped, as every epoch does; with parameter servers each trainer's step
    /// is a global step).
    pub fn steps_per_epoch(&self, input_fn: &dyn InputFn) -> Result<u64> {
        let dataset = input_fn.dataset(Mode::Train, &self.train_strategy.training_input_context())?;
        let batch = dataset.batch_size().ok_or_else(|| {
            EstimatorError::Other("epochs need a batched training input: its batches are what a step takes".into())
        })?;
        let per_pipeline = dataset.steps_per_epoch(batch)?;
        // Asynchronous training counts every trainer's step in the global step.
        Ok(match self.train_strategy.kind() {
            crate::strategy::StrategyKind::ParameterServer => {
                per_pipeline * self.train_strategy.training_input_context().num_input_pipelines as u64
            }
            _ => per_pipeline,
        })
    }

    /// The dataset of `input_fn` for `mode` under `strategy`, and the model compiled for
    /// its schema with the tensors `hooks` fetch: the start of training, evaluation and a
    /// ps task's serving alike.
    pub(crate) fn compile_for(
        &self,
        mode: Mode,
        input_fn: &dyn InputFn,
        strategy: &dyn Strategy,
        hooks: &[Box<dyn SessionRunHook>],
    ) -> Result<(Dataset, crate::session::Compiled)> {
        let required: Vec<String> = hooks.iter().flat_map(|h| h.required_tensors()).collect();
        self.compile_requiring(mode, input_fn, strategy, &required)
    }

    /// [`Estimator::compile_for`] with the tensors the hooks fetch named already.
    pub(crate) fn compile_requiring(
        &self,
        mode: Mode,
        input_fn: &dyn InputFn,
        strategy: &dyn Strategy,
        required: &[String],
    ) -> Result<(Dataset, crate::session::Compiled)> {
        let dataset = self.dataset(input_fn, mode, strategy)?;
        let schema = dataset.schema()?;
        let compiled = compile(self.model_fn.as_ref(), &self.params, mode, &schema, strategy, required)?;
        Ok((dataset, compiled))
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

    /// A ps task's part of training: compile the training graph exactly as the training
    /// tasks do (their handshake compares its fingerprint), then serve this task's share of
    /// the variables until training ends.
    fn serve_parameters(&self, input_fn: &dyn InputFn, hooks: &[Box<dyn SessionRunHook>]) -> Result<TrainOutcome> {
        let strategy = self.train_strategy.clone();
        let (_, compiled) = self.compile_for(Mode::Train, input_fn, strategy.as_ref(), hooks)?;
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
        Ok(self.evaluate_with_matrices(input_fn, steps, hooks, checkpoint_path, name)?.0)
    }

    /// [`Estimator::evaluate`], with the confusion matrices of the model's
    /// `ConfusionMatrix` metrics (row = the label's class, column = the predicted class).
    pub fn evaluate_with_matrices(
        &self,
        input_fn: &dyn InputFn,
        steps: Option<u64>,
        hooks: Vec<Box<dyn SessionRunHook>>,
        checkpoint_path: Option<&str>,
        name: Option<&str>,
    ) -> Result<(EvalResult, ConfusionMatrices)> {
        let checkpoint = match checkpoint_path {
            Some(p) => read_checkpoint(p, self.config.s3.as_ref())?,
            None => {
                self.checkpoints.restore_latest_valid()?.ok_or(EstimatorError::NoCheckpoint("evaluate"))?.checkpoint
            }
        };
        let mut evaluator = self.evaluator(input_fn, steps, hooks, name)?;
        let result = evaluator.evaluate(&checkpoint)?;
        Ok((result, std::mem::take(&mut evaluator.matrices)))
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
        let (dataset, mut compiled) = self.compile_for(Mode::Eval, input_fn, strategy.as_ref(), &hooks)?;
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
            matrices: BTreeMap::new(),
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
            for (name, matrix) in &outcome.matrices {
                let table = crate::metrics::confusion_markdown(matrix, None);
                self.eval_summaries.write_text(&dir, step, name, &table)?;
            }
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
        replicas
            .restore(&checkpoint.tensors, self.seed)
            .map_err(|e| self.restore_error(e, "predict from", &checkpoint.path))?;
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
    /// The last evaluation's confusion matrices, by metric name.
    matrices: ConfusionMatrices,
}

impl Evaluator<'_> {
    /// The confusion matrices of the last evaluation (row = the label's class, column = the
    /// predicted class), by metric name: what is not a scalar of its result.
    pub fn matrices(&self) -> &ConfusionMatrices {
        &self.matrices
    }

    pub fn evaluate(&mut self, checkpoint: &Checkpoint) -> Result<EvalResult> {
        self.replicas
            .restore(&checkpoint.tensors, self.estimator.seed)
            .map_err(|e| self.estimator.restore_error(e, "evaluate", &checkpoint.path))?;
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
        self.matrices = outcome.matrices.clone();
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

/// An elastic job's training pipeline for a membership of `members` workers: the one
/// pipeline of the whole job (every worker reads it all, in the one-process order), each
/// batch a worker's share of the global batch. The global batch is the spec's batch size
/// times `max_workers` (the cluster's chief and workers unless the spec says more): what
/// the job reads at full strength. It stays that as workers come and go, so a step takes
/// the same examples whoever is left, and every task derives it from the spec alone (a
/// task from outside the cluster spec sees another cluster); every membership the job
/// may have must divide it.
fn elastic_share(dataset: Dataset, members: usize, counts: std::ops::RangeInclusive<usize>) -> Result<Dataset> {
    let per_worker = dataset.batch_size().ok_or_else(|| {
        EstimatorError::Config(
            "an elastic job needs a batched training input: its batches are what a step takes".into(),
        )
    })?;
    let (min, max) = (*counts.start(), *counts.end());
    let global = per_worker * max;
    if let Some(n) = counts.chain(std::iter::once(members)).find(|&n| n == 0 || !global.is_multiple_of(n)) {
        return Err(EstimatorError::Config(format!(
            "the global batch of {global} (batch_size {per_worker} times max_workers {max}) does not divide \
             among {n} workers: an elastic job keeps its global batch whoever is left, so every worker count from \
             min_workers ({min}) to max_workers ({max}) must divide it"
        )));
    }
    if global / members == per_worker {
        return Ok(dataset);
    }
    Ok(dataset.rebatch(global / members)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batched(batch: usize) -> Dataset {
        let x = HostTensor::f32(vec![48, 1], (0..48).map(|v| v as f32).collect()).unwrap();
        Dataset::from_tensors(BTreeMap::from([("x".to_string(), x)]), None).unwrap().batch(batch)
    }

    #[test]
    fn an_elastic_share_keeps_the_global_batch_and_every_count_must_divide_it() {
        // 4 per worker, 3 workers: a global batch of 12, 6 each for 2.
        assert_eq!(elastic_share(batched(4), 2, 2..=3).unwrap().batch_size(), Some(6));
        assert_eq!(elastic_share(batched(4), 3, 2..=3).unwrap().batch_size(), Some(4));
        // Room for a fourth from outside the cluster: 16 at full strength, 16/3 is no batch.
        let error = elastic_share(batched(4), 3, 2..=4).unwrap_err().to_string();
        assert!(error.contains("the global batch of 16 (batch_size 4 times max_workers 4)"), "{error}");
        assert_eq!(elastic_share(batched(6), 3, 2..=4).unwrap().batch_size(), Some(8));
        // 5 per worker, 3 workers: 15 does not divide among 2.
        let error = elastic_share(batched(5), 3, 2..=3).unwrap_err().to_string();
        assert!(
            error.contains("the global batch of 15 (batch_size 5 times max_workers 3) does not divide among 2"),
            "{error}"
        );
    }
}
