//! Errors of the `engine` command.

use crate::{lower::LowerError, spec::SpecError};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CliError {
    #[error(transparent)]
    Spec(#[from] SpecError),

    #[error(transparent)]
    Lower(#[from] LowerError),

    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Estimator(#[from] engine_estimator::EstimatorError),

    #[error(transparent)]
    Cluster(#[from] engine_runtime::cluster::ClusterError),

    #[error("{0}")]
    Usage(String),

    /// A task of a local cluster failed; `code` is its exit status (what the launcher
    /// exits with, so that a restart policy reads it as it would the task's).
    #[error("{message}")]
    Launch { message: String, code: Option<u8> },
}

/// A job error is the spec's, the model's or the estimator's, with their exit statuses.
impl From<crate::job::JobError> for CliError {
    fn from(e: crate::job::JobError) -> Self {
        use crate::job::JobError;
        match e {
            JobError::Spec(e) => CliError::Spec(e),
            JobError::Lower(e) => CliError::Lower(e),
            JobError::Estimator(e) => CliError::Estimator(e),
        }
    }
}

/// The exit statuses of `engine`, as the README documents them. Kubeflow's
/// `restartPolicy: ExitCode` restarts a task on 128-255 and gives up on 1-127.
pub mod exit {
    const _: () = assert!(RETRYABLE >= 128 && FAILURE < 128 && USAGE < 128);
    /// A permanent error: the spec, the model, the data (a NaN included), a checkpoint of
    /// another job, a cluster whose tasks disagree. Running again changes nothing.
    pub const FAILURE: u8 = 1;
    /// A usage error on the command line (clap's status too).
    pub const USAGE: u8 = 2;
    /// A failure that running again may not have: a lost or unreachable peer, a collective
    /// or connection timeout, an object store that did not answer.
    pub const RETRYABLE: u8 = 200;
}

impl CliError {
    /// The process's exit status for this error: 128 + the signal after a preemption
    /// (143 for SIGTERM, 130 for SIGINT), [`exit::RETRYABLE`], [`exit::USAGE`] or
    /// [`exit::FAILURE`].
    pub fn exit_code(&self) -> u8 {
        use engine_estimator::{EstimatorError, preemption::Signal};
        match self {
            CliError::Estimator(EstimatorError::Preempted { signal, .. }) => signal.unwrap_or(Signal::TERM).exit_code(),
            CliError::Estimator(e) if e.is_retryable() => exit::RETRYABLE,
            CliError::Usage(_) => exit::USAGE,
            CliError::Launch { code: Some(code), .. } => *code,
            _ => exit::FAILURE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_estimator::{EstimatorError, preemption::Signal};
    use engine_runtime::RuntimeError;

    #[test]
    fn permanent_errors_exit_below_128_and_retryable_ones_above() {
        let preempted = |signal| CliError::Estimator(EstimatorError::Preempted { signal, step: Some(7) });
        assert_eq!(preempted(Some(Signal::TERM)).exit_code(), 143);
        assert_eq!(preempted(Some(Signal::INT)).exit_code(), 130);
        // A task stopped because another task of its cluster was preempted.
        assert_eq!(preempted(None).exit_code(), 143);
        let lost =
            RuntimeError::Collective { op: "all_reduce".into(), reason: "worker:1 went away".into(), retryable: true };
        assert_eq!(CliError::Estimator(EstimatorError::Runtime(lost)).exit_code(), exit::RETRYABLE);
        let shape = RuntimeError::Kernel { node: "dense".into(), op: "MatMul", reason: "shapes".into() };
        assert_eq!(CliError::Estimator(EstimatorError::Runtime(shape)).exit_code(), exit::FAILURE);
        let nan = EstimatorError::NonFinite { step: 3, value: "the gradient of w".into(), cause: "input".into() };
        assert_eq!(CliError::Estimator(nan).exit_code(), exit::FAILURE);
        assert_eq!(CliError::Usage("no".into()).exit_code(), exit::USAGE);
        assert_eq!(CliError::Launch { message: "worker:1 failed".into(), code: Some(200) }.exit_code(), 200);
    }
}
