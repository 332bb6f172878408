//! Elementwise cosine (cosine learning-rate decay).

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cos;

impl OpDef for Cos {
    fn name(&self) -> &'static str {
        "Cos"
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
        let s = ctx.b.sin(x)?;
        let p = ctx.b.mul(gy, s)?;
        let g = ctx.b.neg(p)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn cos(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Cos.into(), &[x])
    }
}
