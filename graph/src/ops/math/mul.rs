//! Elementwise product with broadcasting.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Mul;

impl OpDef for Mul {
    fn name(&self) -> &'static str {
        "Mul"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::broadcast(inputs, None)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        for i in 0..2 {
            if ctx.needs(i) {
                let other = ctx.input(1 - i);
                let shape = ctx.input_fact(i)?.shape;
                let prod = ctx.b.mul(gy, other)?;
                let g = ctx.b.sum_to(prod, &shape)?;
                ctx.set(i, g);
            }
        }
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn mul(&mut self, a: Outlet, b: Outlet) -> Result<Outlet> {
        self.op(Mul.into(), &[a, b])
    }
}
