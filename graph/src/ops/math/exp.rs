//! Elementwise e^x; its gradient reuses the output.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Exp;

impl OpDef for Exp {
    fn name(&self) -> &'static str {
        "Exp"
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
        let g = ctx.b.mul(gy, y)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn exp(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Exp.into(), &[x])
    }
}
