//! exp(x) / sum(exp(x)) along one axis, computed stably by the runtime.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Softmax {
    pub axis: usize,
}

impl OpDef for Softmax {
    fn name(&self) -> &'static str {
        "Softmax"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        if self.axis >= inputs[0].rank() {
            return Err(format!("axis {} is out of range for {}", self.axis, inputs[0].shape));
        }
        rules::unary_float(inputs)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // y * (gy - sum(gy * y, axis))
        let gy = ctx.out_grad(0)?;
        let y = ctx.output(0);
        let gyy = ctx.b.mul(gy, y)?;
        let s = ctx.b.reduce_sum(gyy, &[self.axis], true)?;
        let d = ctx.b.sub(gy, s)?;
        let g = ctx.b.mul(y, d)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, _: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        4 * outputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    /// Softmax along `axis` (negative counts from the end).
    pub fn softmax(&mut self, x: Outlet, axis: i64) -> Result<Outlet> {
        let axis = self.axis_of(x, axis)?;
        self.op(Softmax { axis }.into(), &[x])
    }

    /// Normalizes a possibly negative axis against `x`'s rank.
    pub fn axis_of(&self, x: Outlet, axis: i64) -> Result<usize> {
        let shape = &self.fact(x)?.shape;
        shape
            .axis(axis)
            .ok_or_else(|| crate::GraphError::invalid("axis", format!("{axis} is out of range for {shape}")))
    }
}
