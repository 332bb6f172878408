//! A value fed from outside at every step (features, labels).

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result, Shape,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Placeholder {
    pub dtype: DType,
    pub shape: Shape,
}

impl OpDef for Placeholder {
    fn name(&self) -> &'static str {
        "Placeholder"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _: &[Fact]) -> Result<Vec<Fact>, String> {
        Ok(vec![Fact::new(self.dtype, self.shape.clone())])
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
    fn is_pure(&self) -> bool {
        false
    }
}

impl GraphBuilder<'_> {
    /// A feed named exactly `name` (placeholders are addressed by name when fed).
    pub fn placeholder(&mut self, name: &str, dtype: DType, shape: Shape) -> Result<Outlet> {
        self.op_named(name, Placeholder { dtype, shape }.into(), &[])
    }
}
