//! `TrainSpec` and `EvalSpec`, as `tf.estimator` has them, and the exporters an evaluation
//! hands its result to: what `train_and_evaluate` takes, in one process or by role in a
//! cluster (`distributed`), which both read from here.

use crate::{Estimator, EvalResult, InputFn, Result, hooks::SessionRunHook};
use std::sync::Arc;

pub struct TrainSpec {
    pub input_fn: Arc<dyn InputFn>,
    pub max_steps: Option<u64>,
    /// Passes over the training input, as the strategy shards it; training stops at the
    /// end of the last one or at `max_steps`, whichever comes first (an Estimator
    /// input_fn's `num_epochs` beside `max_steps`).
    pub epochs: Option<u64>,
    pub hooks: Vec<Box<dyn SessionRunHook>>,
}

pub struct EvalSpec {
    pub input_fn: Arc<dyn InputFn>,
    /// Batches per evaluation; `None` is one full pass.
    pub steps: Option<u64>,
    pub name: Option<String>,
    pub hooks: Vec<Box<dyn SessionRunHook>>,
    pub exporters: Vec<Box<dyn Exporter>>,
    /// Used by a cluster's evaluator task before its first evaluation.
    pub start_delay_secs: u64,
    /// Minimum time between evaluations.
    pub throttle_secs: u64,
    /// Evaluate every this many steps instead of by time.
    pub every_n_steps: Option<u64>,
}

impl TrainSpec {
    /// `tf.estimator.TrainSpec(input_fn, max_steps)`, without hooks; add them with
    /// [`TrainSpec::with_hooks`]. `input_fn` is what `Estimator::train` takes: a function or
    /// closure `(Mode, &InputContext) -> Result<Dataset, InputError>`.
    pub fn new(input_fn: impl InputFn + 'static, max_steps: Option<u64>) -> Self {
        Self::from_shared(Arc::new(input_fn), max_steps)
    }

    /// With an input function shared with other owners.
    pub fn from_shared(input_fn: Arc<dyn InputFn>, max_steps: Option<u64>) -> Self {
        TrainSpec { input_fn, max_steps, epochs: None, hooks: Vec::new() }
    }

    /// Keras' `fit(epochs=...)`: see [`TrainSpec::epochs`].
    pub fn with_epochs(mut self, epochs: u64) -> Self {
        self.epochs = Some(epochs);
        self
    }

    /// The global step training ends at: `max_steps`, or the end of `epochs`, whichever
    /// comes first; `None` trains until the input ends.
    pub fn last_step(&self, estimator: &Estimator) -> Result<Option<u64>> {
        let Some(epochs) = self.epochs else { return Ok(self.max_steps) };
        let per_epoch = estimator.steps_per_epoch(self.input_fn.as_ref())?;
        let end = epochs.checked_mul(per_epoch).ok_or_else(|| {
            crate::EstimatorError::Other(format!("{epochs} epochs of {per_epoch} steps overflow the global step"))
        })?;
        let last = self.max_steps.map_or(end, |m| m.min(end));
        log::info!(
            "{epochs} epoch(s) of {per_epoch} steps end at step {end}{}",
            match self.max_steps {
                Some(m) if m < end => format!("; max_steps {m} comes first"),
                _ => String::new(),
            }
        );
        Ok(Some(last))
    }

    pub fn with_hooks(mut self, hooks: Vec<Box<dyn SessionRunHook>>) -> Self {
        self.hooks = hooks;
        self
    }
}

impl EvalSpec {
    /// TensorFlow's wait before a cluster's evaluator first evaluates.
    pub const DEFAULT_START_DELAY_SECS: u64 = 120;
    /// TensorFlow's least time between evaluations.
    pub const DEFAULT_THROTTLE_SECS: u64 = 600;

    /// `tf.estimator.EvalSpec(input_fn)` with TensorFlow's defaults (start after 120 s,
    /// then at most every 600 s, over the whole input).
    pub fn new(input_fn: impl InputFn + 'static) -> Self {
        Self::from_shared(Arc::new(input_fn))
    }

    /// With an input function shared with other owners.
    pub fn from_shared(input_fn: Arc<dyn InputFn>) -> Self {
        EvalSpec {
            input_fn,
            steps: None,
            name: None,
            hooks: Vec::new(),
            exporters: Vec::new(),
            start_delay_secs: Self::DEFAULT_START_DELAY_SECS,
            throttle_secs: Self::DEFAULT_THROTTLE_SECS,
            every_n_steps: None,
        }
    }
}

/// Called after each evaluation with the checkpoint evaluated (TensorFlow's Exporter).
pub trait Exporter: Send {
    fn name(&self) -> &str;
    /// Returns where the export went, if anywhere.
    fn export(
        &mut self,
        estimator: &Estimator,
        checkpoint: &str,
        result: &EvalResult,
        is_the_final_export: bool,
    ) -> Result<Option<String>>;
}

/// Hands an evaluation result to every exporter (local and distributed evaluation alike).
pub(crate) fn run_exporters(
    exporters: &mut [Box<dyn Exporter>],
    estimator: &Estimator,
    path: &str,
    result: &EvalResult,
    is_final: bool,
) -> Result<()> {
    for e in exporters.iter_mut() {
        if let Some(out) = e.export(estimator, path, result, is_final)? {
            log::info!("Exporter {} wrote {out}", e.name());
        }
    }
    Ok(())
}
