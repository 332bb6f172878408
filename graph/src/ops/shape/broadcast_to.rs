//! Stretches a tensor to a broadcast-compatible shape (gradients of reductions).

use crate::{
    Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BroadcastTo {
    pub shape: Shape,
}

impl OpDef for BroadcastTo {
    fn name(&self) -> &'static str {
        "BroadcastTo"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let x = &inputs[0];
        match x.shape.broadcast(&self.shape) {
            Some(s) if s == self.shape => Ok(vec![Fact::new(x.dtype, self.shape.clone())]),
            _ => Err(format!("{} does not broadcast to {}", x.shape, self.shape)),
        }
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let shape = ctx.input_fact(0)?.shape;
        let g = ctx.b.sum_to(gy, &shape)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn broadcast_to(&mut self, x: Outlet, shape: Shape) -> Result<Outlet> {
        if self.fact(x)?.shape == shape {
            return Ok(x);
        }
        self.op(BroadcastTo { shape }.into(), &[x])
    }

    /// Zeros with `x`'s fact (a scalar zero broadcast at run time, so any batch size works).
    pub fn zeros_like(&mut self, x: Outlet) -> Result<Outlet> {
        let shape = self.fact(x)?.shape.clone();
        let zero = self.scalar(0.0)?;
        self.op(BroadcastTo { shape }.into(), &[zero])
    }
}
