//! Elementwise quotient with broadcasting.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Div;

impl OpDef for Div {
    fn name(&self) -> &'static str {
        "RealDiv"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::broadcast(inputs, None)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let (a, b) = (ctx.input(0), ctx.input(1));
        if ctx.needs(0) {
            let shape = ctx.input_fact(0)?.shape;
            let q = ctx.b.div(gy, b)?;
            let g = ctx.b.sum_to(q, &shape)?;
            ctx.set(0, g);
        }
        if ctx.needs(1) {
            // d(a/b)/db = -a/b^2
            let shape = ctx.input_fact(1)?.shape;
            let b2 = ctx.b.square(b)?;
            let num = ctx.b.mul(gy, a)?;
            let q = ctx.b.div(num, b2)?;
            let neg = ctx.b.neg(q)?;
            let g = ctx.b.sum_to(neg, &shape)?;
            ctx.set(1, g);
        }
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn div(&mut self, a: Outlet, b: Outlet) -> Result<Outlet> {
        self.op(Div.into(), &[a, b])
    }
}
