//! Elementwise natural logarithm.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Log;

impl OpDef for Log {
    fn name(&self) -> &'static str {
        "Log"
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
        let g = ctx.b.div(gy, x)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn log(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Log.into(), &[x])
    }
}
