//! Sum over axes.

use super::{kept_shape, reduced};
use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReduceSum {
    pub axes: Vec<usize>,
    pub keep_dims: bool,
}

impl OpDef for ReduceSum {
    fn name(&self) -> &'static str {
        "Sum"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        reduced(&inputs[0], &self.axes, self.keep_dims, &[DType::F32, DType::I64])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let x = ctx.input_fact(0)?;
        let kept = ctx.b.reshape(gy, kept_shape(&x.shape, &self.axes, true))?;
        let g = ctx.b.broadcast_to(kept, x.shape)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        inputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    /// Sum over `axes` (already non-negative); all axes when empty.
    pub fn reduce_sum(&mut self, x: Outlet, axes: &[usize], keep_dims: bool) -> Result<Outlet> {
        let axes = self.all_axes_if_empty(x, axes)?;
        self.op(ReduceSum { axes, keep_dims }.into(), &[x])
    }

    pub(crate) fn all_axes_if_empty(&self, x: Outlet, axes: &[usize]) -> Result<Vec<usize>> {
        let mut axes = if axes.is_empty() { (0..self.fact(x)?.rank()).collect() } else { axes.to_vec() };
        axes.sort_unstable();
        axes.dedup();
        Ok(axes)
    }
}
