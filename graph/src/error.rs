//! The graph crate's errors: every variant names the node (or pass) it concerns.

use crate::{DType, Fact};
use thiserror::Error;

pub type Result<T, E = GraphError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum GraphError {
    /// Shape inference refused the inputs of a node.
    #[error("shape error at node '{node}' ({op}): {reason}; input facts: {}", fmt_facts(.inputs))]
    Shape { node: String, op: &'static str, reason: String, inputs: Vec<Fact> },

    #[error("node '{node}' ({op}) takes {expected} input(s), got {got}")]
    Arity { node: String, op: &'static str, expected: String, got: usize },

    #[error("a node named '{0}' already exists")]
    DuplicateName(String),

    #[error("no node named '{0}'")]
    UnknownNode(String),

    #[error("node '{node}' has no output {output}")]
    NoSuchOutput { node: String, output: usize },

    #[error("no gradient is defined for op {op} (node '{node}'), which lies between a trainable variable and the loss")]
    NoGradient { node: String, op: &'static str },

    #[error("the loss '{node}' must be a scalar f32, found {fact}")]
    LossNotScalar { node: String, fact: Fact },

    #[error("variable '{variable}' is assigned more than once in one step (by '{first}' and '{second}')")]
    DoubleAssign { variable: String, first: String, second: String },

    #[error("expected dtype {expected} at node '{node}', found {found}")]
    DType { node: String, expected: DType, found: DType },

    #[error("tensor data of length {len} does not fill shape {shape:?}")]
    TensorData { shape: Vec<usize>, len: usize },

    #[error("the graph has a cycle through node '{0}'")]
    Cycle(String),

    #[error("after pass '{pass}': {source}")]
    Pass { pass: String, source: Box<GraphError> },

    #[error("graph inconsistent: {0}")]
    Inconsistent(String),

    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },
}

impl GraphError {
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        GraphError::Invalid { what: what.into(), reason: reason.into() }
    }
}

fn fmt_facts(facts: &[Fact]) -> String {
    let parts: Vec<String> = facts.iter().map(|f| f.to_string()).collect();
    parts.join(", ")
}
