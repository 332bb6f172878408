//! Mean over axes; the divisor is computed at run time, so reducing over the batch
//! dimension is exact for any batch size.

use super::{kept_shape, reduced};
use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReduceMean {
    pub axes: Vec<usize>,
    pub keep_dims: bool,
}

impl OpDef for ReduceMean {
    fn name(&self) -> &'static str {
        "Mean"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        reduced(&inputs[0], &self.axes, self.keep_dims, &[DType::F32])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let x_out = ctx.input(0);
        let x = ctx.input_fact(0)?;
        let kept = ctx.b.reshape(gy, kept_shape(&x.shape, &self.axes, true))?;
        let count = ctx.b.size(x_out, &self.axes)?;
        let scaled = ctx.b.div(kept, count)?;
        let g = ctx.b.broadcast_to(scaled, x.shape)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        inputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    /// Mean over `axes`; all axes when empty.
    pub fn reduce_mean(&mut self, x: Outlet, axes: &[usize], keep_dims: bool) -> Result<Outlet> {
        let axes = self.all_axes_if_empty(x, axes)?;
        self.op(ReduceMean { axes, keep_dims }.into(), &[x])
    }
}
