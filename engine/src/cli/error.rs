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

    #[error("{0}")]
    Launch(String),
}
