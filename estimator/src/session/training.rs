//! The training loop: TensorFlow's MonitoredTrainingSession, with hooks.

use crate::{
    EstimatorError, NonFinitePolicy, Result,
    checkpoint::CheckpointManager,
    hooks::{HookContext, RunArgs, RunValues, SessionRunHook, SessionState, SharedSummaryWriter},
    input::{Batch, DatasetIter, IteratorState},
    model_dir::ModelDir,
    preemption::{self, Signal},
    session::{
        Compiled, Replicas,
        ahead::{Ahead, Forecast, pipelines},
    },
};
use engine_graph::{HostTensor, Outlet, passes::strategy::STOP_REQUEST};
use engine_runtime::{NonFinite, RunOptions};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Instant;

pub(crate) struct TrainingSession<'a> {
    pub compiled: &'a Compiled,
    pub replicas: Replicas,
    pub input: DatasetIter,
    pub global_step: u64,
    pub model_dir: &'a ModelDir,
    pub checkpoints: &'a CheckpointManager,
    pub summary: Option<SharedSummaryWriter>,
    pub is_chief: bool,
    pub global_batch_size: usize,
    pub non_finite: NonFinitePolicy,
    /// Whether other processes train too (a NaN may then sit in another task's batch).
    pub in_cluster: bool,
    /// Set when training stopped because a stop was asked for: the signal this process
    /// received, or `None` when another task of the cluster received it.
    pub preempted: Option<Option<Signal>>,
    /// Examples the whole job has read, skipped batches included (saved in checkpoints).
    pub examples_seen: u64,
    /// The checkpoint step a hook asked to restore when training ends.
    pub restore: Cell<Option<u64>>,
    /// Variables a hook assigned, not yet applied.
    pub assign: RefCell<BTreeMap<String, HostTensor>>,
    /// Where each step's examples are recorded, for tests (see `ExampleLog`).
    pub example_log: Option<super::ExampleLog>,
    /// Workers an elastic job may still take in (0 for any other job).
    pub room_for_joiners: usize,
    /// Set when every task agreed to end the session and re-form the group (a worker asked
    /// to join): training goes on after the rendezvous.
    pub reform_requested: bool,
    /// The next step's batch, pulled (and launched) before this step's hooks ran.
    pub ahead: Option<Ahead>,
    /// What the step launched ahead fetches.
    pub forecast: Forecast,
}

/// What a task adds to the agreed stop request when a worker asked it to join: a task asked
/// to stop adds 1, so a sum carries both, exactly in f32 (at most 1024 workers).
const REFORM_REQUEST: f64 = 4096.0;

/// How a training run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainOutcome {
    pub global_step: u64,
    /// The loss of the last step run (`None` if no step ran).
    pub loss: Option<f64>,
}

struct State<'s> {
    replicas: &'s Replicas,
    input: &'s DatasetIter,
    /// The input's position while a batch pulled ahead is held (not yet trained on).
    input_before: Option<&'s IteratorState>,
    fingerprint: &'s str,
    examples_seen: u64,
}

impl SessionState for State<'_> {
    fn export_variables(&self) -> Result<BTreeMap<String, HostTensor>> {
        self.replicas.export()
    }
    fn input_state(&self) -> String {
        let state = match self.input_before {
            Some(before) => serde_json::to_string(before),
            None => serde_json::to_string(&self.input.state()),
        };
        state.unwrap_or_else(|_| "{}".into())
    }
    fn fingerprint(&self) -> String {
        self.fingerprint.to_string()
    }
    fn examples_seen(&self) -> u64 {
        self.examples_seen
    }
}

impl TrainingSession<'_> {
    /// The error for a step whose values were not finite: the first such value, and what
    /// the input batches (re-decoded from their ids) say about the cause.
    fn non_finite_error(&self, values: &[NonFinite], ids: &[Vec<u64>]) -> Result<EstimatorError> {
        let mut value = values.first().map(ToString::to_string).unwrap_or_default();
        if let Some(rest) = values.get(1..).filter(|r| !r.is_empty()) {
            let named: Vec<&str> = rest.iter().take(3).map(|v| v.message.as_str()).collect();
            let more = if rest.len() > 3 { format!(" and {} more", rest.len() - 3) } else { String::new() };
            value.push_str(&format!(" (also not finite: the {}{more})", named.join(", the ")));
        }
        let mut culprit = None;
        for batch in ids {
            if let Some(found) = self.input.find_non_finite(batch)? {
                culprit = Some(found);
                break;
            }
        }
        let cause = match culprit {
            Some(found) => format!("the input is to blame: {found}"),
            None if self.in_cluster => {
                "this task's input batch holds no NaN or infinity: another task's may, else the model \
                 diverged (lower the learning rate, or clip gradients with clip_global_norm)"
                    .to_string()
            }
            None => {
                "the input batch holds no NaN or infinity, so the model diverged (lower the learning rate, or clip \
                 gradients with clip_global_norm)"
                    .to_string()
            }
        };
        Ok(EstimatorError::NonFinite { step: self.global_step, value, cause })
    }

    /// Counts skipped batches in the summaries, at the step they would have been.
    fn record_skipped(&self, skipped: u64) -> Result<()> {
        if let Some(writer) = &self.summary {
            let mut w = writer.lock().map_err(|_| EstimatorError::Other("the summary writer is poisoned".into()))?;
            w.scalar("non_finite_batches_skipped", self.global_step, skipped as f64)?;
            w.flush()?;
        }
        Ok(())
    }

    fn with_ctx<T>(&self, stop: &Cell<bool>, f: impl FnOnce(&HookContext<'_>) -> T) -> T {
        let state = State {
            replicas: &self.replicas,
            input: &self.input,
            input_before: self.ahead.as_ref().map(|a| &a.before),
            fingerprint: &self.compiled.fingerprint,
            examples_seen: self.examples_seen,
        };
        let ctx = HookContext {
            global_step: self.global_step,
            is_chief: self.is_chief,
            model_dir: self.model_dir,
            checkpoints: self.checkpoints,
            summary: self.summary.as_ref(),
            global_batch_size: self.global_batch_size,
            session: &state,
            stop,
            restore: &self.restore,
            assign: &self.assign,
        };
        f(&ctx)
    }

    /// Runs steps until a hook requests a stop (StopAtStepHook ends every bounded run) or
    /// the input is exhausted, then calls every hook's `end`.
    pub fn run(&mut self, hooks: &mut [Box<dyn SessionRunHook + '_>]) -> Result<TrainOutcome> {
        if let Some(h) = hooks.iter().find(|h| h.changes_variables())
            && (self.in_cluster || self.replicas.on_parameter_servers())
        {
            return Err(EstimatorError::Hook {
                hook: h.name().into(),
                reason: "changes variables while training runs (ReduceLROnPlateau, EarlyStopping with \
                         restore_best_weights), which a cluster does not support yet: every task would have to \
                         apply the same values at the same step. Train in one process (default, one_device, \
                         mirrored, central_storage), or use a learning-rate schedule"
                    .into(),
            });
        }
        let stop = Cell::new(false);
        self.with_ctx(&stop, |ctx| hooks.iter_mut().try_for_each(|h| h.begin(ctx)))?;
        self.with_ctx(&stop, |ctx| hooks.iter_mut().try_for_each(|h| h.after_create_session(ctx)))?;
        let graph = StepGraph::of(self.compiled, &self.replicas)?;
        let ahead = pipelines(&self.replicas, self.in_cluster, graph.stop_request.is_some());
        let mut progress = Progress::default();
        let result = (|| -> Result<()> {
            while !stop.get() {
                let asked = preemption::requested();
                progress.announce(asked, graph.stop_request.is_some(), self.global_step);
                if asked.is_some() && graph.stop_request.is_none() {
                    self.preempted = Some(asked);
                    break;
                }
                let (args, fetches) = self.step_fetches(hooks, &stop, &graph)?;
                let Some(input) = self.next_input(&stop, graph.stop_request.is_some(), asked)? else { break };
                let input_wait = input.wait;
                let started = Instant::now();
                let reads_before = engine_runtime::device_reads();
                let options = RunOptions { step: self.global_step as i64, replica: 0, profile: args.profile };
                let ids = input.ids.clone();
                if let Some(log) = &mut self.example_log {
                    log.record(self.global_step, &ids)?;
                }
                let (outs, pulled) = self.run_input(input, &fetches, options, ahead)?;
                self.examples_seen += self.global_batch_size as u64;
                let step_time = started.elapsed().saturating_sub(pulled);
                if let Some(values) = outs.first().map(|o| &o.non_finite).filter(|v| !v.is_empty()) {
                    self.skip_or_fail(values, &ids, &mut progress)?;
                    continue;
                }
                progress.skipped_in_a_row = 0;
                self.advance(&stop);
                let first = outs.first().ok_or_else(|| EstimatorError::Other("no replica ran".into()))?;
                // The logged loss is the global batch's: all-reduced in the graph by the
                // all-reducing strategies, else combined from the local replicas.
                let losses = outs
                    .iter()
                    .map(|o| Ok(o.fetched[0].to_host()?.scalar_value().unwrap_or(f64::NAN)))
                    .collect::<Result<Vec<f64>>>()?;
                let step_loss = self.compiled.replica_losses.combine(&losses);
                progress.last_loss = Some(step_loss);
                let mut results = BTreeMap::new();
                results.insert("loss".to_string(), HostTensor::scalar_f32(step_loss as f32));
                for (name, value) in args.fetches.iter().zip(&first.fetched[2..]) {
                    if name != "loss" {
                        results.insert(name.clone(), value.to_host()?);
                    }
                }
                // The step's reads: its own and the fetched results' (the loss comes back
                // with the numerics flag, so reading it here costs nothing more).
                let device_reads = graph.on_device.then(|| engine_runtime::device_reads().saturating_sub(reads_before));
                let values = RunValues {
                    results,
                    timings: first.timings.clone(),
                    step_time,
                    input_wait,
                    collectives: first.collectives.clone(),
                    device_reads,
                };
                let agreed = match graph.stop_request {
                    Some(_) => first
                        .fetched
                        .last()
                        .map(|v| v.to_host())
                        .transpose()?
                        .and_then(|t| t.scalar_value())
                        .unwrap_or(0.0),
                    None => 0.0,
                };
                for h in hooks.iter_mut() {
                    self.with_ctx(&stop, |ctx| h.after_run(ctx, &values))?;
                    if self.apply_assigns(h.name())?
                        && let Some(a) = &mut self.ahead
                    {
                        // The launched step read the variables before this assignment.
                        a.drop_launch();
                    }
                }
                let (reform, stops) = (agreed >= REFORM_REQUEST, agreed % REFORM_REQUEST);
                if stops > 0.0 {
                    log::info!(
                        "Stopping at step {}: {stops} task(s) of the cluster were asked to stop",
                        self.global_step
                    );
                    self.preempted = Some(asked);
                    stop.set(true);
                } else if reform {
                    log::info!(
                        "Ending the session at step {} to take in a worker that asked to join",
                        self.global_step
                    );
                    self.reform_requested = true;
                    stop.set(true);
                }
            }
            Ok(())
        })();
        // As in TensorFlow, a failed step ends the session without `end`: no checkpoint
        // records a state the failure may have left half-advanced (the input position).
        result?;
        if let Some(step) = self.restore.get() {
            self.restore_weights(step)?;
        }
        self.with_ctx(&stop, |ctx| hooks.iter_mut().try_for_each(|h| h.end(ctx)))?;
        Ok(TrainOutcome { global_step: self.global_step, loss: progress.last_loss })
    }

    /// Sets the variables hook `hook` assigned, in every local replica (`run` refuses such
    /// hooks in a cluster before the first step); says whether it assigned any.
    fn apply_assigns(&mut self, hook: &str) -> Result<bool> {
        let values = std::mem::take(&mut *self.assign.borrow_mut());
        if values.is_empty() {
            return Ok(false);
        }
        let names: Vec<&str> = values.keys().map(String::as_str).collect();
        let loaded = self.replicas.restore(&values, 0)?;
        if let Some(missing) = names.iter().find(|n| !loaded.iter().any(|l| l == *n)) {
            return Err(EstimatorError::Hook {
                hook: hook.into(),
                reason: format!("assigns '{missing}', which is not a variable of the training graph"),
            });
        }
        Ok(true)
    }

    /// Loads every variable of `model.ckpt-<step>` but the global step into every replica,
    /// before `end`, so that the final checkpoint holds them (`run` refuses such hooks in a
    /// cluster before the first step).
    fn restore_weights(&mut self, step: u64) -> Result<()> {
        let name = format!("model.ckpt-{step}");
        let checkpoint = self.checkpoints.restore(&name)?;
        let mut values = checkpoint.tensors;
        values.remove("global_step");
        let loaded = self.replicas.restore(&values, 0)?;
        log::info!(
            "Restored the {} variables of {name} (all but the global step); step {} saves them",
            loaded.len(),
            self.global_step
        );
        Ok(())
    }

    /// What every step fetches: the loss, the train op, what the hooks ask for (each
    /// hook's `before_run`), and in a cluster the agreed stop.
    fn step_fetches(
        &self,
        hooks: &mut [Box<dyn SessionRunHook + '_>],
        stop: &Cell<bool>,
        graph: &StepGraph,
    ) -> Result<(RunArgs, Vec<Outlet>)> {
        let mut args = RunArgs::default();
        for h in hooks.iter_mut() {
            let a = self.with_ctx(stop, |ctx| h.before_run(ctx))?;
            args.fetches.extend(a.fetches);
            args.profile |= a.profile;
        }
        args.fetches.sort();
        args.fetches.dedup();
        let mut fetches: Vec<Outlet> = vec![graph.loss, graph.train_op];
        for name in &args.fetches {
            let o = self.compiled.fetch(name).ok_or_else(|| EstimatorError::Hook {
                hook: "before_run".into(),
                reason: format!("no tensor named '{name}' (hooks must list node names in required_tensors)"),
            })?;
            fetches.push(o);
        }
        fetches.extend(graph.stop_request);
        Ok((args, fetches))
    }

    /// One batch per local replica, or `None` (and a stop) when the input is exhausted. In
    /// a cluster each batch also carries whether this task was asked to stop.
    pub(super) fn next_batches(
        &mut self,
        stop: &Cell<bool>,
        agrees: bool,
        asked: Option<Signal>,
    ) -> Result<Option<Vec<Batch>>> {
        let mut batches: Vec<Batch> = Vec::with_capacity(self.replicas.len());
        for _ in 0..self.replicas.len() {
            match self.input.next() {
                Some(b) => batches.push(b?),
                None => {
                    log::info!("Input exhausted at step {}", self.global_step);
                    stop.set(true);
                    return Ok(None);
                }
            }
        }
        if agrees {
            let joiners = self.replicas.cross_process_group().map_or(0, |g| g.pending_joiners());
            let reform = if joiners > 0 && self.room_for_joiners > 0 { REFORM_REQUEST } else { 0.0 };
            let flag = HostTensor::scalar_f32((if asked.is_some() { 1.0 } else { 0.0 } + reform) as f32);
            // Fed like a feature: batches are the step's feeds.
            batches.iter_mut().for_each(|b| {
                b.features.insert(STOP_REQUEST.into(), flag.clone());
            });
        }
        Ok(Some(batches))
    }

    /// A step's outcome, with a label out of range named by where its example came from,
    /// not by its row in a batch.
    pub(super) fn label_error<T>(&self, outcome: Result<T>, ids: &[Vec<u64>]) -> Result<T> {
        match outcome {
            Err(EstimatorError::Runtime(engine_runtime::RuntimeError::LabelOutOfRange {
                label,
                position,
                classes,
                replica,
                ..
            })) => {
                let id = ids.get(replica as usize).and_then(|b| b.get(position)).copied();
                let example = match id {
                    Some(id) => self.input.locate(id),
                    None => format!("row {position} of the batch"),
                };
                Err(EstimatorError::LabelOutOfRange { label, classes, example })
            }
            other => other,
        }
    }

    /// A step whose values were not finite committed nothing: under `Skip` it is counted
    /// and training goes on, unless too many came in a row; under `Stop` it is the error.
    fn skip_or_fail(&self, values: &[NonFinite], ids: &[Vec<u64>], progress: &mut Progress) -> Result<()> {
        let error = self.non_finite_error(values, ids)?;
        let NonFinitePolicy::Skip { max_consecutive } = self.non_finite else { return Err(error) };
        progress.skipped += 1;
        progress.skipped_in_a_row += 1;
        if progress.skipped_in_a_row > max_consecutive {
            log::error!(
                "{} batches in a row were not finite (at most {max_consecutive} may be skipped)",
                progress.skipped_in_a_row
            );
            return Err(error);
        }
        log::warn!("Skipping a batch: {error} ({} skipped so far)", progress.skipped);
        self.record_skipped(progress.skipped)
    }

    /// The global step after a step that committed (with ps tasks, the updates every task
    /// applied), and a stop when the chief finished or a ps task was asked to stop.
    fn advance(&mut self, stop: &Cell<bool>) {
        self.global_step = self.replicas.remote_global_step().unwrap_or(self.global_step + 1);
        if self.replicas.finished() {
            log::info!("Training is over (the chief finished) at global step {}", self.global_step);
            stop.set(true);
        }
        if self.replicas.stopping() {
            log::info!("Stopping at global step {}: a ps task was asked to stop", self.global_step);
            self.preempted = Some(None);
            stop.set(true);
        }
    }
}

/// What of the compiled graph every step needs.
struct StepGraph {
    loss: Outlet,
    train_op: Outlet,
    /// In a cluster, the flag tasks agree on the step to stop at (see `AgreeOnStop`).
    stop_request: Option<Outlet>,
    /// Whether the replicas run on a queued device (their reads are counted).
    on_device: bool,
}

impl StepGraph {
    fn of(compiled: &Compiled, replicas: &Replicas) -> Result<Self> {
        let loss = compiled.loss.ok_or_else(|| EstimatorError::Other("training graph has no loss".into()))?;
        let train_op =
            compiled.train_op.ok_or_else(|| EstimatorError::Other("training graph has no train op".into()))?;
        Ok(StepGraph {
            loss,
            train_op,
            stop_request: compiled.named.get(STOP_REQUEST).copied(),
            on_device: replicas.on_queued_device(),
        })
    }
}

/// What the loop carries from step to step.
#[derive(Default)]
struct Progress {
    last_loss: Option<f64>,
    skipped: u64,
    skipped_in_a_row: u64,
    announced: bool,
}

impl Progress {
    /// Says once that a stop was asked for, and how it will happen.
    fn announce(&mut self, asked: Option<Signal>, agreed: bool, step: u64) {
        let Some(signal) = asked else { return };
        if self.announced {
            return;
        }
        self.announced = true;
        if agreed {
            log::info!("Received {signal}: the cluster stops after the next step, then the chief saves a checkpoint");
        } else {
            log::info!("Received {signal}: stopping at step {step}; saving a checkpoint");
        }
    }
}
