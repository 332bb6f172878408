//! 1 / (1 + e^-x).

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sigmoid;

impl OpDef for Sigmoid {
    fn name(&self) -> &'static str {
        "Sigmoid"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::unary_float(inputs)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // gy * y * (1 - y)
        let gy = ctx.out_grad(0)?;
        let y = ctx.output(0);
        let one = ctx.b.scalar(1.0)?;
        let one_minus = ctx.b.sub(one, y)?;
        let dy = ctx.b.mul(y, one_minus)?;
        let g = ctx.b.mul(gy, dy)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn sigmoid(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Sigmoid.into(), &[x])
    }
}
