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

    #[error(
        "training is not wired yet: `{spec}` is valid and compiles ({nodes} nodes in the training plan), \
         but `engine run` is not connected to the runtime"
    )]
    NotWired { spec: String, nodes: usize },
}
