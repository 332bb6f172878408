//! Elementwise x^2.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Square;

impl OpDef for Square {
    fn name(&self) -> &'static str {
        "Square"
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
        let two = ctx.b.scalar(2.0)?;
        let tx = ctx.b.mul(x, two)?;
        let g = ctx.b.mul(gy, tx)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn square(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Square.into(), &[x])
    }
}
