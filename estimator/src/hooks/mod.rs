//! Session hooks with TensorFlow's lifecycle.
//!
//! `begin` (graph compiled) → `after_create_session` (variables initialized or restored)
//! → for every step `before_run` (which may ask for extra tensors by name) and `after_run`
//! (which sees them) → `end`. Any callback may request a stop; the loop finishes the step
//! it is in and then calls `end`, so a final checkpoint always follows.

mod checkpoint_saver;
mod early_stopping;
mod fault_injection;
mod logging_tensor;
mod nan_tensor;
mod profiler;
mod progress_bar;
mod reduce_lr;
mod registry;
mod step_counter;
mod stop_at_step;
mod summary_saver;

pub use checkpoint_saver::{CheckpointSaverHook, CheckpointSaverListener};
pub use early_stopping::{EarlyStoppingHook, StopCondition};
pub use fault_injection::{FAULT_ENV, FAULT_EXIT_CODE, FaultInjectionHook, RESTART_COUNT_ENV};
pub use logging_tensor::LoggingTensorHook;
pub use nan_tensor::NanTensorHook;
pub use profiler::ProfilerHook;
pub(crate) use progress_bar::EvalProgress;
pub use progress_bar::{ProgressBarHook, print_line};
pub use reduce_lr::{Monitor, ReduceLrOnPlateauHook};
pub use registry::{HOOK_NAMES, HookConfig, hook_from_config};
pub use step_counter::StepCounterHook;
pub use stop_at_step::StopAtStepHook;
pub use summary_saver::SummarySaverHook;

use crate::{Result, checkpoint::CheckpointManager, model_dir::ModelDir, summary::SummaryWriter};
use engine_graph::HostTensor;
use engine_runtime::OpTiming;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A summary writer shared by the hooks of one session (the step counter, the summary
/// saver and evaluation write into the same event files).
pub type SharedSummaryWriter = Arc<Mutex<SummaryWriter>>;

/// What the running session offers hooks beyond the step's values.
pub trait SessionState {
    /// Every variable, read back to the host (what a checkpoint saves).
    fn export_variables(&self) -> Result<BTreeMap<String, HostTensor>>;
    /// The input pipeline's position as JSON, restored with a checkpoint.
    fn input_state(&self) -> String;
    /// The job fingerprint recorded in checkpoints.
    fn fingerprint(&self) -> String;
    /// Examples the whole job has read so far (every replica, skipped batches included).
    fn examples_seen(&self) -> u64;
}

/// The view every hook callback gets.
pub struct HookContext<'a> {
    /// Before a step: the step about to run. After a step: the step just completed + 1,
    /// i.e. the value of `global_step` now (TensorFlow's convention for hooks).
    pub global_step: u64,
    pub is_chief: bool,
    pub model_dir: &'a ModelDir,
    pub checkpoints: &'a CheckpointManager,
    pub summary: Option<&'a SharedSummaryWriter>,
    /// Examples per step across all replicas.
    pub global_batch_size: usize,
    pub session: &'a dyn SessionState,
    pub(crate) stop: &'a Cell<bool>,
    /// A checkpoint step whose variables replace the trained ones when training ends.
    pub(crate) restore: &'a Cell<Option<u64>>,
    /// Variables a hook assigned, applied by the loop before the next hook runs.
    pub(crate) assign: &'a RefCell<BTreeMap<String, HostTensor>>,
}

impl HookContext<'_> {
    /// Asks the loop to stop after the current step.
    pub fn request_stop(&self) {
        self.stop.set(true);
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.get()
    }

    /// Asks the loop to load the variables of checkpoint `model.ckpt-<step>` (all but the
    /// global step) once the last step has run, so that the final checkpoint holds them
    /// (Keras' `restore_best_weights`). Only a training session acts on it.
    pub fn request_restore(&self, step: u64) {
        self.restore.set(Some(step));
    }

    pub fn restore_requested(&self) -> Option<u64> {
        self.restore.get()
    }

    /// Sets variable `name` to `value` between steps, in every replica (what a hook's
    /// `session.run(assign_op)` does in TensorFlow); the hooks after this one, the saver
    /// included, see it. Only a training session acts on it, and refuses a name the
    /// graph lacks.
    pub fn request_assign(&self, name: &str, value: HostTensor) {
        self.assign.borrow_mut().insert(name.to_string(), value);
    }
}

/// What a hook asks of the next step.
#[derive(Debug, Clone, Default)]
pub struct RunArgs {
    /// Tensor names to fetch: `loss`, `learning_rate`, `global_step`, or any node name
    /// the hook listed in [`SessionRunHook::required_tensors`].
    pub fetches: Vec<String>,
    /// Time every op of this step (Chrome trace).
    pub profile: bool,
}

/// What a step produced for a hook.
#[derive(Debug, Clone, Default)]
pub struct RunValues {
    pub results: BTreeMap<String, HostTensor>,
    /// Op timings when any hook asked for profiling.
    pub timings: Vec<OpTiming>,
    /// Wall time of the step (input wait excluded).
    pub step_time: Duration,
    /// Time the step waited for its input batch.
    pub input_wait: Duration,
    /// The step's collectives (replica 0's), with how much of each overlapped compute.
    pub collectives: Vec<engine_runtime::CollectiveTiming>,
    /// On a GPU (any queued device), how many times the step read a device tensor back
    /// to the host, the fetched results included: each read drains the device's queue.
    /// `None` on the CPU.
    pub device_reads: Option<u64>,
}

pub trait SessionRunHook: Send {
    fn name(&self) -> &str;

    /// Node names this hook will fetch, so compilation keeps them.
    fn required_tensors(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether this hook assigns or restores variables while training runs, which only
    /// one process holding all of them can do: a cluster's tasks refuse it before the
    /// first step instead of at the first assignment.
    fn changes_variables(&self) -> bool {
        false
    }

    fn begin(&mut self, _ctx: &HookContext<'_>) -> Result<()> {
        Ok(())
    }

    fn after_create_session(&mut self, _ctx: &HookContext<'_>) -> Result<()> {
        Ok(())
    }

    fn before_run(&mut self, _ctx: &HookContext<'_>) -> Result<RunArgs> {
        Ok(RunArgs::default())
    }

    fn after_run(&mut self, _ctx: &HookContext<'_>, _values: &RunValues) -> Result<()> {
        Ok(())
    }

    fn end(&mut self, _ctx: &HookContext<'_>) -> Result<()> {
        Ok(())
    }
}

/// Reads a scalar result, if fetched.
pub(crate) fn scalar(values: &RunValues, name: &str) -> Option<f64> {
    values.results.get(name).and_then(|t| t.scalar_value())
}
