//! A persistent value: read at the start of a step, replaced by `Assign` at its end.

use crate::{
    DType, Fact, GraphBuilder, GraphError, Initializer, Outlet, Result, Shape,
    ops::{Arity, OpDef},
};

/// A variable's shape is fully known (no batch dimension): it is state, not data.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Variable {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub init: Initializer,
    pub trainable: bool,
    /// Set on a row shard of a partitioned variable (and on its optimizer slots).
    pub partition: Option<Partition>,
}

/// This variable is rows `offset..offset + shape[0]` of the variable `of`, whose shape is
/// `full_shape`: it starts as that slice of `of`'s initial value, and checkpoints hold
/// `of` whole, so a partitioned run and an unpartitioned one read each other's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Partition {
    pub of: String,
    pub full_shape: Vec<usize>,
    pub offset: usize,
}

impl OpDef for Variable {
    fn name(&self) -> &'static str {
        "VariableV2"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _: &[Fact]) -> Result<Vec<Fact>, String> {
        Ok(vec![Fact::new(self.dtype, Shape::known(&self.shape))])
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
    fn is_pure(&self) -> bool {
        false
    }
}

impl GraphBuilder<'_> {
    /// A float variable named `name` in the current scope (`dense/kernel`).
    pub fn variable(&mut self, name: &str, shape: &[usize], init: Initializer, trainable: bool) -> Result<Outlet> {
        // Two variables of one name would be one checkpoint entry: refuse instead of
        // renaming the second (a model function that declares `kernel` twice has a bug).
        let full = self.prefixed(name);
        if self.graph().contains_name(&full) {
            return Err(GraphError::invalid(
                &full,
                "a variable or node of this name exists already: give each layer its own scope (with_scope, \
                 unique_scope) or the variable another name",
            ));
        }
        let op = Variable { dtype: DType::F32, shape: shape.to_vec(), init, trainable, partition: None };
        self.op_named(&full, op.into(), &[])
    }

    /// The global step: an i64 scalar, created once, named `global_step` at the top level.
    pub fn global_step(&mut self) -> Result<Outlet> {
        if let Ok(id) = self.graph().find("global_step") {
            return Ok(Outlet::from(id));
        }
        let op =
            Variable { dtype: DType::I64, shape: vec![], init: Initializer::Zeros, trainable: false, partition: None };
        self.op_named("global_step", op.into(), &[])
    }
}
