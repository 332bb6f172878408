//! The number of elements along some axes, as an f32 scalar computed at run time.
//!
//! Means over the batch dimension divide by it, so a graph compiled once is exact for the
//! last partial batch of an evaluation and for any per-replica batch.

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Size {
    /// Axes to count over; all axes when empty.
    pub axes: Vec<usize>,
}

impl OpDef for Size {
    fn name(&self) -> &'static str {
        "Size"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        if let Some(a) = self.axes.iter().find(|&&a| a >= inputs[0].rank()) {
            return Err(format!("axis {a} is out of range for {}", inputs[0].shape));
        }
        Ok(vec![Fact::scalar(DType::F32)])
    }
    fn grad(&self, _: &mut GradCtx<'_, '_>) -> Result<()> {
        Ok(())
    }
    fn stops_gradient(&self) -> bool {
        true
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
}

impl GraphBuilder<'_> {
    pub fn size(&mut self, x: Outlet, axes: &[usize]) -> Result<Outlet> {
        self.op(Size { axes: axes.to_vec() }.into(), &[x])
    }
}
