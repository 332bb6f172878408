//! x - log(sum(exp(x))) along one axis, computed stably by the runtime.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogSoftmax {
    pub axis: usize,
}

impl OpDef for LogSoftmax {
    fn name(&self) -> &'static str {
        "LogSoftmax"
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
        // gy - exp(y) * sum(gy, axis)
        let gy = ctx.out_grad(0)?;
        let y = ctx.output(0);
        let p = ctx.b.exp(y)?;
        let s = ctx.b.reduce_sum(gy, &[self.axis], true)?;
        let ps = ctx.b.mul(p, s)?;
        let g = ctx.b.sub(gy, ps)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, _: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        4 * outputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn log_softmax(&mut self, x: Outlet, axis: i64) -> Result<Outlet> {
        let axis = self.axis_of(x, axis)?;
        self.op(LogSoftmax { axis }.into(), &[x])
    }
}
