//! Elementwise sine.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sin;

impl OpDef for Sin {
    fn name(&self) -> &'static str {
        "Sin"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::unary_float(inputs)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let x = ctx.input(0);
        let c = ctx.b.cos(x)?;
        let g = ctx.b.mul(gy, c)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn sin(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Sin.into(), &[x])
    }
}
