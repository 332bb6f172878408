//! Maximum over axes; ties share the gradient equally, as in TensorFlow.

use super::{kept_shape, reduced};
use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReduceMax {
    pub axes: Vec<usize>,
    pub keep_dims: bool,
}

impl OpDef for ReduceMax {
    fn name(&self) -> &'static str {
        "Max"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        reduced(&inputs[0], &self.axes, self.keep_dims, &[DType::F32])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let (x, y) = (ctx.input(0), ctx.output(0));
        let x_shape = ctx.input_fact(0)?.shape;
        let keep = kept_shape(&x_shape, &self.axes, true);
        let y_kept = ctx.b.reshape(y, keep.clone())?;
        let gy_kept = ctx.b.reshape(gy, keep)?;
        let hit = ctx.b.equal(x, y_kept)?;
        let mask = ctx.b.cast(hit, DType::F32)?;
        let ties = ctx.b.reduce_sum(mask, &self.axes, true)?;
        let share = ctx.b.div(gy_kept, ties)?;
        let g = ctx.b.mul(mask, share)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        inputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    /// Maximum over `axes`; all axes when empty.
    pub fn reduce_max(&mut self, x: Outlet, axes: &[usize], keep_dims: bool) -> Result<Outlet> {
        let axes = self.all_axes_if_empty(x, axes)?;
        self.op(ReduceMax { axes, keep_dims }.into(), &[x])
    }
}
