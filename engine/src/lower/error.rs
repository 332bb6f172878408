//! Lowering errors: the spec's fault (located) or a compiler pass's (named).

use crate::spec::SpecError;
use engine_graph::GraphError;
use thiserror::Error;

/// `Debug` is the message and its causes (see [`engine_graph::fmt_error_chain`]).
impl std::fmt::Debug for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        engine_graph::fmt_error_chain(self, f)
    }
}

#[derive(Error)]
pub enum LowerError {
    /// The spec asks for something that does not fit (shapes, classes): located in the spec.
    #[error(transparent)]
    Spec(#[from] SpecError),

    /// A pass failed on a graph the spec produced.
    #[error("{stage}: {source}")]
    Graph {
        stage: &'static str,
        #[source]
        source: GraphError,
    },

    /// The strategy could not be built or its passes failed.
    #[error("strategy: {0}")]
    Strategy(String),
}
