//! Integer classes to one-hot float vectors.

use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    ops::{Arity, OpDef, rules},
};

/// `[..] i64 -> [.., depth] f32`; out-of-range classes give all-zero rows, as in TensorFlow.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OneHot {
    pub depth: usize,
}

impl OpDef for OneHot {
    fn name(&self) -> &'static str {
        "OneHot"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::expect_dtype(&inputs[0], DType::I64, "indices")?;
        let mut dims = inputs[0].shape.dims().to_vec();
        dims.push(Dim::Known(self.depth));
        Ok(vec![Fact::f32(Shape(dims))])
    }
}

impl GraphBuilder<'_> {
    pub fn one_hot(&mut self, indices: Outlet, depth: usize) -> Result<Outlet> {
        self.op(OneHot { depth }.into(), &[indices])
    }
}
