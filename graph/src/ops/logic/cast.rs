//! Converts between dtypes (bool masks to floats, integer steps to floats).

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cast {
    pub to: DType,
}

impl OpDef for Cast {
    fn name(&self) -> &'static str {
        "Cast"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        Ok(vec![Fact::new(self.to, inputs[0].shape.clone())])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // Only a float-to-float cast is ever on a gradient path.
        let gy = ctx.out_grad(0)?;
        ctx.set(0, gy);
        Ok(())
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
}

impl GraphBuilder<'_> {
    pub fn cast(&mut self, x: Outlet, to: DType) -> Result<Outlet> {
        if self.fact(x)?.dtype == to {
            return Ok(x);
        }
        self.op(Cast { to }.into(), &[x])
    }
}
