//! Elementwise maximum; on ties the gradient goes to the first operand, as in TensorFlow.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Maximum;

impl OpDef for Maximum {
    fn name(&self) -> &'static str {
        "Maximum"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::broadcast(inputs, None)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let (a, b) = (ctx.input(0), ctx.input(1));
        let b_wins = ctx.b.less(a, b)?;
        route_gradient(ctx, b_wins)
    }
}

impl GraphBuilder<'_> {
    pub fn maximum(&mut self, a: Outlet, b: Outlet) -> Result<Outlet> {
        self.op(Maximum.into(), &[a, b])
    }
}

/// Sends the output gradient to `b` where `b_wins`, else to `a` (shared with `Minimum`).
pub(super) fn route_gradient(ctx: &mut GradCtx<'_, '_>, b_wins: Outlet) -> Result<()> {
    let gy = ctx.out_grad(0)?;
    let mask_b = ctx.b.cast(b_wins, crate::DType::F32)?;
    let one = ctx.b.scalar(1.0)?;
    let mask_a = ctx.b.sub(one, mask_b)?;
    for (i, mask) in [(0, mask_a), (1, mask_b)] {
        if ctx.needs(i) {
            let shape = ctx.input_fact(i)?.shape;
            let part = ctx.b.mul(gy, mask)?;
            let g = ctx.b.sum_to(part, &shape)?;
            ctx.set(i, g);
        }
    }
    Ok(())
}
