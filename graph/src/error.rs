//! The graph crate's errors: every variant names the node (or pass) it concerns.

use crate::{DType, Fact};
use thiserror::Error;

pub type Result<T, E = GraphError> = std::result::Result<T, E>;

/// Formats an error as its message and the chain of its causes: what `Debug` shows for
/// the engine's errors, so that `fn main() -> Result<(), Box<dyn Error>>` prints sentences,
/// not enum variants and `Known(13)`.
pub fn fmt_error_chain(e: &dyn std::error::Error, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    write!(f, "{e}")?;
    let mut cause = e.source();
    while let Some(c) = cause {
        write!(f, "\n  caused by: {c}")?;
        cause = c.source();
    }
    Ok(())
}

impl std::fmt::Debug for GraphError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_error_chain(self, f)
    }
}

#[derive(Error)]
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

#[cfg(test)]
mod debug_tests {
    use super::*;
    use crate::Shape;

    /// `fn main() -> Result<(), Box<dyn Error>>` prints `Debug`: a sentence, not variants.
    #[test]
    fn debug_prints_the_message_not_the_variant() {
        let e = GraphError::Shape {
            node: "dense/MatMul".into(),
            op: "MatMul",
            reason: "inner dimensions differ".into(),
            inputs: vec![Fact::f32(Shape::batched(&[13]))],
        };
        let debug = format!("{e:?}");
        assert_eq!(debug, e.to_string());
        assert!(debug.contains("[N, 13]") && !debug.contains("Known(") && !debug.contains("Shape {"), "{debug}");
    }
}
