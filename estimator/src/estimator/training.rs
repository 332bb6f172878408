//! `train`'s steps: take the model dir (its writer lease, the newest checkpoint that
//! loads), compile and start the replicas where the checkpoint left off, assemble the
//! hooks in TensorFlow's order, run the session, and end together with the cluster.

use super::{Estimator, StepLimit};
use crate::{
    EstimatorError, InputFn, Mode, Result,
    checkpoint::{Checkpoint, CheckpointMeta, RestoredCheckpoint, WriterLock, read_checkpoint},
    hooks::{
        CheckpointSaverHook, CheckpointSaverListener, FaultInjectionHook, LoggingTensorHook, NanTensorHook,
        ProgressBarHook, SessionRunHook, SharedSummaryWriter, StepCounterHook, StopAtStepHook, SummarySaverHook,
    },
    input::{Dataset, DatasetIter, IteratorState},
    session::{Compiled, ExampleLog, Replicas, TrainOutcome, TrainingSession},
    strategy::Strategy,
    summary::{HParam, SummaryWriter},
};
use engine_graph::HostTensor;
use engine_runtime::{Value, cluster::TaskType};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

impl Estimator {
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
        let mut writer = match self.train_strategy.is_chief() {
            true => Some(WriterLock::acquire(&self.model_dir, &command_line(), WRITER_LEASE)?),
            false => None,
        };
        let restored = self.restore_for_training()?;
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
        let required: Vec<String> = hooks.iter().flat_map(|h| h.required_tensors()).collect();
        let mut user_hooks = Some(hooks);
        let mut listeners = Some(saving_listeners);
        let mut all_hooks: Vec<Box<dyn SessionRunHook + 'l>> = Vec::new();
        // Whether `all_hooks` has the chief's hooks: a worker that becomes the chief of an
        // elastic job (its chief was lost) adds them.
        let mut chief_hooks = false;
        let mut callers_at = 0;
        // The variables this task held when its group failed, carried into the re-formed one
        // (`None` only for the first session: every later one re-forms or joins a group).
        let mut carried: Option<BTreeMap<String, Value>> = None;
        loop {
            let (dataset, mut compiled) =
                self.compile_requiring(Mode::Train, input_fn, strategy.as_ref(), &required)?;
            // A worker of an elastic job that runs without it (new, or started again after it
            // was lost) joins at the job's next step, taking its state from a member.
            if carried.is_none() && strategy.join_running_job(&compiled.handshake_fingerprint)? {
                carried = Some(BTreeMap::new());
                continue;
            }
            self.check_memory(&compiled, &dataset, strategy.as_ref())?;
            let global_batch = schema_batch(&dataset) * strategy.num_replicas_in_sync();
            let (replicas, input, start, examples_seen) = match carried.take() {
                None => {
                    let (replicas, input, start) =
                        self.first_replicas(&compiled, &dataset, restored.as_ref(), start)?;
                    let examples_seen = match &restored {
                        Some(r) => r.checkpoint.meta.examples_seen.unwrap_or(start * global_batch as u64),
                        None => 0,
                    };
                    (replicas, input, start, examples_seen)
                }
                Some(values) => {
                    let (replicas, input, step) = self.rejoin_replicas(&compiled, &dataset, &values)?;
                    (replicas, input, step, step * global_batch as u64)
                }
            };
            if strategy.num_replicas_in_sync() > 1 {
                log::info!(
                    "{} replicas in sync ({}): global batch {global_batch}, {} per replica",
                    strategy.num_replicas_in_sync(),
                    strategy.describe(),
                    schema_batch(&dataset)
                );
            }
            let is_chief = strategy.is_chief();
            if let Some(hooks) = user_hooks.take() {
                (all_hooks, callers_at) = self.training_hooks(&mut compiled, hooks, last_step)?;
            }
            if is_chief && !chief_hooks {
                self.hold_writer_lock(&mut writer)?;
                let added = self.chief_hooks(&mut compiled, &all_hooks, last_step);
                all_hooks.splice(callers_at..callers_at, added);
                // The saver runs last so that a checkpoint includes what other hooks did.
                all_hooks.push(Box::new(CheckpointSaverHook::new(trigger, listeners.take().unwrap_or_default())));
                chief_hooks = true;
            }
            let summary = if is_chief { self.training_summaries(&compiled, start)? } else { None };
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
                restore: Cell::new(None),
                assign: Default::default(),
                example_log: ExampleLog::from_env(strategy.cluster().map(|c| c.task().to_string()))?,
                room_for_joiners: room_for_joiners(strategy.as_ref()),
                reform_requested: false,
                ahead: None,
                forecast: Default::default(),
            };
            let outcome = match session.run(&mut all_hooks) {
                Ok(outcome) if session.reform_requested => {
                    // Every task ended the same step to take in a joiner: re-form, go on.
                    let values = session.replicas.snapshot();
                    drop(session);
                    drop(compiled);
                    strategy.reform(outcome.global_step)?;
                    carried = Some(values);
                    continue;
                }
                Ok(outcome) => outcome,
                Err(e) if strategy.elastic_membership().is_some() && lost_a_member(&e) => {
                    // Each task's failed step committed nothing; the re-formed group goes on
                    // from the task that completed the most steps.
                    let step = session.global_step;
                    let values = session.replicas.snapshot();
                    let meta = CheckpointMeta {
                        fingerprint: compiled.fingerprint.clone(),
                        input_state: String::new(),
                        examples_seen: Some(session.examples_seen),
                    };
                    log::warn!("The step after {step} failed: {e}");
                    drop(session);
                    drop(compiled);
                    self.reform_or_stop(&mut writer, &values, step, &meta)?;
                    carried = Some(values);
                    continue;
                }
                Err(e) => {
                    // A first run that fails before its first step leaves the model dir as it
                    // found it, so that the corrected spec starts afresh.
                    if restored.is_none() && is_chief && session.global_step == 0 {
                        match self.checkpoints.discard_initial() {
                            Ok(true) => log::info!(
                                "Removed model.ckpt-0: training failed before its first step, so {} is as it was",
                                self.model_dir
                            ),
                            Ok(false) => {}
                            Err(d) => log::warn!("Could not remove model.ckpt-0 after the failed first step: {d}"),
                        }
                    }
                    return Err(e);
                }
            };
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
            return Ok(outcome);
        }
    }

    /// The replicas of a training run's first session, where the checkpoint left off (or
    /// initialized), taking the chief's state in a cluster. Returns the step they start at.
    fn first_replicas(
        &self,
        compiled: &Compiled,
        dataset: &Dataset,
        restored: Option<&RestoredCheckpoint>,
        start: u64,
    ) -> Result<(Replicas, DatasetIter, u64)> {
        let (mut replicas, input) = self.start_replicas(compiled, dataset, restored)?;
        let mut start = start;
        if self.train_strategy.cluster().is_some() {
            replicas.sync_from_chief(start, self.seed)?;
            if let Some(step) = replicas.remote_global_step() {
                start = step;
            }
        }
        Ok((replicas, input, start))
    }

    /// After an elastic job's step failed at `step`: the re-formed group, or, when too few
    /// survive, the rendezvous' error after whoever leads the survivors saved what they
    /// trained.
    fn reform_or_stop(
        &self,
        writer: &mut Option<WriterLock>,
        values: &BTreeMap<String, Value>,
        step: u64,
        meta: &CheckpointMeta,
    ) -> Result<()> {
        let strategy = self.train_strategy.as_ref();
        if let Err(reform) = strategy.reform(step) {
            if strategy.leads_survivors() {
                self.save_before_stopping(writer, values, step, meta);
            }
            return Err(reform);
        }
        Ok(())
    }

    /// Takes the model dir's writer lock unless this task holds it: a task that becomes an
    /// elastic job's chief, or leads its survivors, writes from then on.
    fn hold_writer_lock(&self, writer: &mut Option<WriterLock>) -> Result<()> {
        if writer.is_none() {
            *writer = Some(WriterLock::acquire(&self.model_dir, &command_line(), WRITER_LEASE)?);
        }
        Ok(())
    }

    /// The last completed step's checkpoint, when an elastic job stops below its minimum.
    /// Best effort: the error that stops the job is the one to report, so a failure here is
    /// logged (the model dir then holds the last periodic checkpoint).
    fn save_before_stopping(
        &self,
        writer: &mut Option<WriterLock>,
        values: &BTreeMap<String, Value>,
        step: u64,
        meta: &CheckpointMeta,
    ) {
        let saved = (|| -> Result<String> {
            self.hold_writer_lock(writer)?;
            let host = values
                .iter()
                .map(|(name, v)| Ok((name.clone(), v.to_host()?)))
                .collect::<Result<BTreeMap<String, HostTensor>>>()?;
            Ok(self.checkpoints.save(step, &host, meta)?.path)
        })();
        match saved {
            Ok(path) => log::info!("Saved {path} before stopping"),
            Err(e) => log::error!("Could not save step {step} before stopping: {e}"),
        }
    }

    /// The replicas of a re-formed elastic group: this task's own variables loaded, then
    /// the holder's taken by every member, and the input at the holder's step, this task's
    /// share of each global batch. Returns the step training goes on from.
    fn rejoin_replicas(
        &self,
        compiled: &Compiled,
        dataset: &Dataset,
        values: &BTreeMap<String, Value>,
    ) -> Result<(Replicas, DatasetIter, u64)> {
        let strategy = self.train_strategy.as_ref();
        let membership = strategy
            .elastic_membership()
            .ok_or_else(|| EstimatorError::Other("internal: re-forming a job that is not elastic".into()))?;
        let mut replicas = Replicas::new(compiled, strategy, self.config.precision)?;
        replicas.load_snapshot(values, self.seed)?;
        replicas.take_state_of(membership.holder, self.seed)?;
        log::info!(
            "Continuing from step {} with {} worker(s), the state of {}",
            membership.step,
            membership.size(),
            membership.tasks.get(membership.holder).map(ToString::to_string).unwrap_or_default()
        );
        let input = elastic_input(dataset, strategy, membership.step)?;
        Ok((replicas, input, membership.step))
    }

    /// The newest checkpoint that loads, after the chief clears what interrupted saves
    /// left; damage skipped on the way is reported.
    fn restore_for_training(&self) -> Result<Option<RestoredCheckpoint>> {
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
        Ok(restored)
    }

    /// The replicas with their variables (restored, or initialized and warm-started) and
    /// the input, resumed where the checkpoint left it.
    fn start_replicas(
        &self,
        compiled: &Compiled,
        dataset: &Dataset,
        restored: Option<&RestoredCheckpoint>,
    ) -> Result<(Replicas, DatasetIter)> {
        let strategy = self.train_strategy.as_ref();
        let mut replicas = Replicas::new(compiled, strategy, self.config.precision)?;
        let input = match restored {
            Some(r) => {
                let loaded = replicas
                    .restore(&r.checkpoint.tensors, self.seed)
                    .map_err(|e| self.restore_error(e, "resume from", &r.checkpoint.path))?;
                log::info!("Restoring parameters from {} ({} variables)", r.checkpoint.path, loaded.len());
                if r.checkpoint.meta.fingerprint != compiled.fingerprint {
                    log::warn!(
                        "checkpoint {} was written by another graph (a changed optimizer, schedule, layer or \
                         strategy); restored by name: {}",
                        r.checkpoint.path,
                        variable_changes(compiled, &r.checkpoint)
                    );
                }
                match strategy.elastic_membership() {
                    Some(_) => elastic_input(dataset, strategy, r.checkpoint.step)?,
                    None => resume_input(dataset, &r.checkpoint, strategy, replicas.len() as u64)?,
                }
            }
            None => {
                replicas.initialize(self.seed)?;
                if let Some(ws) = &self.warm_start {
                    let values = ws.select(&read_checkpoint(&ws.checkpoint, self.config.s3.as_ref())?.tensors)?;
                    let loaded = replicas.restore(&values, self.seed)?;
                    log::info!("Warm-started {} variables from {}", loaded.len(), ws.checkpoint);
                }
                match strategy.elastic_membership() {
                    Some(_) => elastic_input(dataset, strategy, 0)?,
                    None => dataset.iter()?,
                }
            }
        };
        Ok((replicas, input))
    }

    /// The chief's summary writer, with the graph and the hyperparameters written first
    /// (`None` when summaries are off).
    fn training_summaries(&self, compiled: &Compiled, start: u64) -> Result<Option<SharedSummaryWriter>> {
        if self.config.save_summary_steps == 0 {
            return Ok(None);
        }
        let mut writer = SummaryWriter::new(&self.model_dir, "")?;
        writer.graph(start, &compiled.plan.graph)?;
        let mut hparams = self.hparams.clone();
        hparams.insert("strategy".into(), HParam::Text(self.train_strategy.name().to_string()));
        hparams.insert("random_seed".into(), HParam::Number(self.seed as f64));
        writer.hparams(&hparams)?;
        Ok(Some(Arc::new(Mutex::new(writer))))
    }

    /// Training's hooks in TensorFlow's order: the NaN check and the loss log, a fault
    /// injected for tests, the stop, the model function's hooks, then the caller's (from
    /// the index returned). The chief's go before the caller's ([`Self::chief_hooks`]), and
    /// the saver last.
    #[allow(clippy::extend_with_drain, reason = "the hooks' lifetimes differ: `append` cannot take them")]
    #[allow(clippy::type_complexity, reason = "the hooks and one index")]
    fn training_hooks<'l>(
        &self,
        compiled: &mut Compiled,
        mut user_hooks: Vec<Box<dyn SessionRunHook>>,
        last_step: Option<u64>,
    ) -> Result<(Vec<Box<dyn SessionRunHook + 'l>>, usize)> {
        let strategy = self.train_strategy.as_ref();
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
        let callers_at = all_hooks.len();
        all_hooks.extend(user_hooks.drain(..));
        Ok((all_hooks, callers_at))
    }

    /// The chief's hooks, added to `hooks` (training's, see [`Self::training_hooks`]): the
    /// spec's chief hooks, then the defaults unless the spec or the caller configures its
    /// own. The saver is added after these.
    fn chief_hooks<'l>(
        &self,
        compiled: &mut Compiled,
        hooks: &[Box<dyn SessionRunHook + 'l>],
        last_step: Option<u64>,
    ) -> Vec<Box<dyn SessionRunHook + 'l>> {
        let mut added: Vec<Box<dyn SessionRunHook + 'l>> = Vec::new();
        added.extend(compiled.spec_chief_hooks.drain(..).map(|h| h as Box<dyn SessionRunHook + 'l>));
        // A step counter or summary saver the spec or the caller configures replaces the
        // default one: two would write every scalar twice.
        let given = |name: &str| hooks.iter().chain(&added).any(|h| h.name() == name);
        let (counter, saver, bar) = (given("StepCounterHook"), given("SummarySaverHook"), given("ProgressBarHook"));
        if !bar {
            added.push(Box::new(ProgressBarHook::new(last_step)));
        }
        if !counter {
            added.push(Box::new(StepCounterHook::new(self.config.log_step_count_steps)));
        }
        if self.config.save_summary_steps > 0 && !saver {
            added.push(Box::new(SummarySaverHook::new(self.config.save_summary_steps, false)));
        }
        added
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

/// Workers an elastic job may still take in (0 for any other job).
fn room_for_joiners(strategy: &dyn Strategy) -> usize {
    match (strategy.elastic_rules(), strategy.elastic_membership()) {
        (Some(rules), Some(m)) => rules.max.saturating_sub(m.size()),
        _ => 0,
    }
}

/// Whether a failed step lost a member of the collective group (its connection broke, or it
/// stopped answering within the timeout), which an elastic job survives by re-forming.
fn lost_a_member(error: &EstimatorError) -> bool {
    matches!(error, EstimatorError::Runtime(engine_runtime::RuntimeError::Collective { retryable: true, .. }))
}

/// An elastic job's input from global step `step`: the one pipeline of the whole job after
/// `step` global batches (a replay of its index stream: exact whoever read them), this
/// task's share of every global batch.
fn elastic_input(dataset: &Dataset, strategy: &dyn Strategy, step: u64) -> Result<DatasetIter> {
    let membership = strategy
        .elastic_membership()
        .ok_or_else(|| EstimatorError::Other("internal: elastic input for a job that is not elastic".into()))?;
    let task = strategy.cluster().map(|c| c.task());
    let rank = task.and_then(|t| membership.rank_of(&t)).ok_or_else(|| {
        EstimatorError::Other(format!("this task is not a member of the job's membership {membership}"))
    })?;
    let members = membership.size();
    Ok(dataset.iter_after(step * members as u64)?.strided(members, rank))
}

/// What a resumed graph's variables differ in from a checkpoint's, by name: the variables
/// it adds (a new optimizer's slots start from their initializers) and the ones it no
/// longer has; else that only values differ (the same variables, another computation).
fn variable_changes(compiled: &Compiled, checkpoint: &Checkpoint) -> String {
    let g = &compiled.plan.graph;
    let graph: std::collections::BTreeSet<&str> = g.variables().into_iter().map(|v| g.node(v).name.as_str()).collect();
    let saved: std::collections::BTreeSet<&str> = checkpoint.tensors.keys().map(String::as_str).collect();
    let list = |names: Vec<&&str>| {
        let shown: Vec<&str> = names.iter().take(4).map(|n| **n).collect();
        let more = if names.len() > 4 { format!(" and {} more", names.len() - 4) } else { String::new() };
        format!("{}{more}", shown.join(", "))
    };
    let new: Vec<&&str> = graph.difference(&saved).collect();
    let gone: Vec<&&str> = saved.difference(&graph).collect();
    match (new.is_empty(), gone.is_empty()) {
        (true, true) => "the same variables; what is computed from them changed".into(),
        (false, true) => format!("{} new variable(s) start from their initializers: {}", new.len(), list(new)),
        (true, false) => format!("{} saved variable(s) are no longer used: {}", gone.len(), list(gone)),
        (false, false) => format!(
            "{} new variable(s) start from their initializers ({}); {} saved one(s) are no longer used ({})",
            new.len(),
            list(new.clone()),
            gone.len(),
            list(gone.clone())
        ),
    }
}

/// The per-replica batch size of a training dataset (its first batch's rows).
pub(super) fn schema_batch(dataset: &Dataset) -> usize {
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
