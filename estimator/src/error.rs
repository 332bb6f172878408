//! The estimator's errors. Each wraps the layer it came from and adds what the training
//! loop knows: the step, the hook, the checkpoint.

use crate::{checkpoint::CheckpointError, input::InputError, model_dir::ModelDirError, summary::SummaryError};
use engine_graph::GraphError;
use engine_runtime::RuntimeError;
use thiserror::Error;

pub type Result<T, E = EstimatorError> = std::result::Result<T, E>;

/// `Debug` is the message and its causes (see [`engine_graph::fmt_error_chain`]).
impl std::fmt::Debug for EstimatorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        engine_graph::fmt_error_chain(self, f)
    }
}

#[derive(Error)]
pub enum EstimatorError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    ModelDir(#[from] ModelDirError),
    #[error(transparent)]
    Summary(#[from] SummaryError),

    /// The model function returned a spec TensorFlow would refuse.
    #[error("invalid EstimatorSpec for mode {mode}: {reason}")]
    Spec { mode: crate::Mode, reason: String },

    #[error("invalid RunConfig: {0}")]
    Config(String),

    /// The job would not fit in this machine (memory), said before it starts.
    #[error("{0}")]
    Resources(String),

    /// NanTensorHook: training diverged.
    #[error("NaN loss during training at step {step}")]
    NanLoss { step: u64 },

    /// A stop was asked for (SIGTERM, SIGINT) and training ended cleanly after the step
    /// in flight, with a checkpoint at `step`. `signal` is `None` on a task that stopped
    /// because another task of its cluster was asked to.
    #[error("{}; {}", match signal {
        Some(s) => format!("received {s}"),
        None => "another task of the cluster was asked to stop".to_string(),
    }, match step {
        Some(step) => format!("stopped at global step {step}, which is checkpointed: run again to resume"),
        None => "stopped evaluating or predicting; what was written stays".to_string(),
    })]
    Preempted { signal: Option<crate::preemption::Signal>, step: Option<u64> },

    /// An evaluation read no example: its metrics would be NaN, not a result.
    #[error("evaluation read no examples: {reason}")]
    EmptyEvaluation { reason: String },

    /// A step produced a NaN or an infinity in a gradient or an update; it changed no
    /// variable. `value` names the first one; `cause` says what the input batch held.
    #[error("step {step} was not applied: {value}; {cause}")]
    NonFinite { step: u64, value: String, cause: String },

    /// A training example's class id has no output in the model: the labels hold more
    /// classes than the output layer has units (or a label is negative).
    #[error(
        "label {label} of the example at {example} is outside the model's {classes} classes [0, {classes}): the \
         output layer gives one logit per class, so it needs at least {} units (or the label is wrong)",
        label.saturating_add(1).max(1)
    )]
    LabelOutOfRange { label: i64, classes: usize, example: String },

    /// Evaluation met a value that is not finite: its metrics would be NaN, or silently
    /// skewed. `cause` names the example when the input holds it.
    #[error("evaluation stopped at batch {batch}: {value}; {cause}")]
    EvalNonFinite { batch: u64, value: String, cause: String },

    #[error("hook {hook}: {reason}")]
    Hook { hook: String, reason: String },

    #[error("unknown {what} '{name}'; valid choices: {}", valid.join(", "))]
    UnknownName { what: &'static str, name: String, valid: Vec<&'static str> },

    #[error("no checkpoint to {0} in the model directory")]
    NoCheckpoint(&'static str),

    #[error("checkpoint {path} was written by another job (fingerprint {found}, this job is {expected})")]
    FingerprintMismatch { path: String, expected: String, found: String },

    #[error("variable '{0}' is not in the checkpoint")]
    UnknownVariable(String),

    #[error("input state in the checkpoint cannot be read: {0}")]
    InputState(String),

    /// The model function failed (a spec's model that does not lower, say).
    #[error(transparent)]
    Model(Box<dyn std::error::Error + Send + Sync>),

    /// A prediction request that does not match the model's signature (a client's error:
    /// servers answer it with HTTP 400).
    #[error("{0}")]
    Request(String),

    #[error("{0}")]
    Other(String),
}

impl EstimatorError {
    /// Whether running again unchanged may succeed (an orchestrator should restart the
    /// task): a lost or slow peer, an unreachable store, a preemption. A spec, data or
    /// configuration error would fail the same way again.
    pub fn is_retryable(&self) -> bool {
        match self {
            EstimatorError::Runtime(e) => e.is_retryable(),
            EstimatorError::ModelDir(e) => e.is_retryable(),
            EstimatorError::Checkpoint(crate::checkpoint::CheckpointError::ModelDir(e)) => e.is_retryable(),
            EstimatorError::Checkpoint(crate::checkpoint::CheckpointError::ConcurrentUpdate { .. }) => true,
            EstimatorError::Preempted { .. } => true,
            _ => false,
        }
    }
}
