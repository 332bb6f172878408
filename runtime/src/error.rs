//! The runtime's errors: each names the node, feed, variable or device it concerns.

use crate::cluster::ClusterError;
use crate::transport::ConnectError;
use engine_graph::GraphError;
use thiserror::Error;

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// `Debug` is the message and its causes (see [`engine_graph::fmt_error_chain`]).
impl std::fmt::Debug for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        engine_graph::fmt_error_chain(self, f)
    }
}

#[derive(Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Graph(#[from] GraphError),

    #[error("feed '{name}': {reason}")]
    Feed { name: String, reason: String },

    /// A class id the model has no output for. `position` is the example's row in the
    /// batch `replica` was fed, so the training loop can say where the example came from.
    #[error(
        "feed '{feed}': label {label} at position {position} is outside the {classes} classes [0, {classes}) the \
         model's output has"
    )]
    LabelOutOfRange { feed: String, label: i64, position: usize, classes: usize, replica: u64 },

    #[error("placeholder '{0}' was not fed")]
    MissingFeed(String),

    #[error("at node '{node}' ({op}): {reason}")]
    Kernel { node: String, op: &'static str, reason: String },

    #[error("device '{spec}': {reason}")]
    Device { spec: String, reason: String },

    #[error("variable '{name}': {reason}")]
    Variable { name: String, reason: String },

    #[error("reading a tensor back from the device failed: {0}")]
    Read(String),

    #[error("collective {op} failed: {reason}")]
    Collective { op: String, reason: String, retryable: bool },

    /// The cluster configuration (flags, `TF_CONFIG`, torchrun, Slurm) does not resolve.
    #[error(transparent)]
    Cluster(#[from] ClusterError),

    /// A parameter-server task failed, refused, or could not be reached: `task` names it
    /// (`ps:0`), or the task that is gone when a ps task reports it (`chief:0`).
    #[error("{task}: {reason}")]
    ParameterServer { task: String, reason: String, retryable: bool },

    /// This task could not join its collective group over the network.
    #[error("joining the collective group failed: {0}")]
    Connect(#[from] ConnectError),
}

impl RuntimeError {
    /// Whether running again unchanged may succeed: a lost or slow peer, a timeout. A
    /// shape, a feed or a configuration will fail the same way.
    pub fn is_retryable(&self) -> bool {
        match self {
            RuntimeError::Collective { retryable, .. } | RuntimeError::ParameterServer { retryable, .. } => *retryable,
            RuntimeError::Connect(e) => e.is_retryable(),
            _ => false,
        }
    }
}

impl From<engine_graph::BadDeviceName> for RuntimeError {
    fn from(e: engine_graph::BadDeviceName) -> Self {
        RuntimeError::Device { reason: e.to_string(), spec: e.name }
    }
}
