//! Hyperbolic tangent.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tanh;

impl OpDef for Tanh {
    fn name(&self) -> &'static str {
        "Tanh"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::unary_float(inputs)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // gy * (1 - y^2)
        let gy = ctx.out_grad(0)?;
        let y = ctx.output(0);
        let y2 = ctx.b.square(y)?;
        let one = ctx.b.scalar(1.0)?;
        let d = ctx.b.sub(one, y2)?;
        let g = ctx.b.mul(gy, d)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn tanh(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Tanh.into(), &[x])
    }
}
