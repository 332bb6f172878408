//! Elementwise difference with broadcasting.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sub;

impl OpDef for Sub {
    fn name(&self) -> &'static str {
        "Sub"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::broadcast(inputs, None)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        if ctx.needs(0) {
            let shape = ctx.input_fact(0)?.shape;
            let g = ctx.b.sum_to(gy, &shape)?;
            ctx.set(0, g);
        }
        if ctx.needs(1) {
            let shape = ctx.input_fact(1)?.shape;
            let neg = ctx.b.neg(gy)?;
            let g = ctx.b.sum_to(neg, &shape)?;
            ctx.set(1, g);
        }
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn sub(&mut self, a: Outlet, b: Outlet) -> Result<Outlet> {
        self.op(Sub.into(), &[a, b])
    }
}
