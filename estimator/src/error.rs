//! The estimator's errors. Each wraps the layer it came from and adds what the training
//! loop knows: the step, the hook, the checkpoint.

use crate::{checkpoint::CheckpointError, input::InputError, model_dir::ModelDirError, summary::SummaryError};
use engine_graph::GraphError;
use engine_runtime::RuntimeError;
use thiserror::Error;

pub type Result<T, E = EstimatorError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
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

    /// NanTensorHook: training diverged.
    #[error("NaN loss during training at step {step}")]
    NanLoss { step: u64 },

    /// A step produced a NaN or an infinity in a gradient or an update; it changed no
    /// variable. `value` names the first one; `cause` says what the input batch held.
    #[error("step {step} was not applied: {value}; {cause}")]
    NonFinite { step: u64, value: String, cause: String },

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

    #[error("{0}")]
    Other(String),
}
