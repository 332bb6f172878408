//! Replaces a variable's value at the end of the step.

use crate::{
    Fact, GraphBuilder, GraphError, Op, Outlet, Result,
    ops::{Arity, OpDef},
};

/// Inputs: `(variable, new value)`; output: the new value. Every read of the variable in
/// the same step sees the old value (reads happen at step start, assignments commit at
/// step end), so the order of updates cannot change results.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Assign;

impl OpDef for Assign {
    fn name(&self) -> &'static str {
        "Assign"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        if inputs[0] != inputs[1] {
            return Err(format!("new value {} does not match variable {}", inputs[1], inputs[0]));
        }
        Ok(vec![inputs[1].clone()])
    }
    fn is_pure(&self) -> bool {
        false
    }
}

impl GraphBuilder<'_> {
    pub fn assign(&mut self, variable: Outlet, value: Outlet) -> Result<Outlet> {
        let node = self.graph().node(variable.node);
        if !matches!(node.op, Op::Variable(_)) {
            return Err(GraphError::invalid("assignment", format!("'{}' is not a variable", node.name)));
        }
        let base = format!("{}/Assign", node.name);
        let name = self.graph().unique_name(&base);
        self.op_named(&name, Assign.into(), &[variable, value])
    }
}
