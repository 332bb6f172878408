//! Elementwise square root; its gradient reuses the output.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sqrt;

impl OpDef for Sqrt {
    fn name(&self) -> &'static str {
        "Sqrt"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::unary_float(inputs)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let y = ctx.output(0);
        let half = ctx.b.scalar(0.5)?;
        let scaled = ctx.b.mul(gy, half)?;
        let g = ctx.b.div(scaled, y)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn sqrt(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Sqrt.into(), &[x])
    }
}
