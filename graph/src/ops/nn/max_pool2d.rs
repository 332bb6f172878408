//! 2-D max pooling. A second output holds the position of each maximum, so the backward
//! pass scatters gradients without searching again.

use super::padding::{Window, nhwc, spatial};
use crate::{
    DType, Fact, GraphBuilder, NodeId, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Outputs: `(pooled values, argmax positions)`. The positions are the runtime's business:
/// only `MaxPool2dGrad` reads them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MaxPool2d {
    pub window: Window,
}

impl OpDef for MaxPool2d {
    fn name(&self) -> &'static str {
        "MaxPool"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let x = &inputs[0];
        rules::expect_dtype(x, DType::F32, "input")?;
        let (ohw, _) = self.window.output(spatial(x, "input")?)?;
        let shape = nhwc(x.shape.dim(0), ohw, x.shape.dim(3));
        Ok(vec![Fact::f32(shape.clone()), Fact::new(DType::I64, shape)])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let g = ctx.b.max_pool2d_grad(ctx.input(0), ctx.output(1), gy, self.window)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, _: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        (outputs[0].shape.num_elements(batch) * self.window.kernel[0] * self.window.kernel[1]) as u64
    }
}

impl GraphBuilder<'_> {
    /// Returns the pooled values; the argmax output is `Outlet::new(id, 1)`.
    pub fn max_pool2d(&mut self, x: Outlet, window: Window) -> Result<Outlet> {
        Ok(Outlet::from(self.max_pool2d_node(x, window)?))
    }

    pub fn max_pool2d_node(&mut self, x: Outlet, window: Window) -> Result<NodeId> {
        self.node("MaxPool", MaxPool2d { window }.into(), &[x])
    }
}
