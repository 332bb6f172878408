//! 2-D average pooling; with SAME padding the padded cells are not counted, as in
//! TensorFlow.

use super::padding::{Window, nhwc, spatial};
use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AvgPool2d {
    pub window: Window,
}

impl OpDef for AvgPool2d {
    fn name(&self) -> &'static str {
        "AvgPool"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let x = &inputs[0];
        rules::expect_dtype(x, DType::F32, "input")?;
        let (ohw, _) = self.window.output(spatial(x, "input")?)?;
        Ok(vec![Fact::f32(nhwc(x.shape.dim(0), ohw, x.shape.dim(3)))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let hw = spatial(&ctx.input_fact(0)?, "input").map_err(|_| ctx.no_gradient())?;
        let g = ctx.b.avg_pool2d_grad(gy, hw, self.window)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, _: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        (outputs[0].shape.num_elements(batch) * self.window.kernel[0] * self.window.kernel[1]) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn avg_pool2d(&mut self, x: Outlet, window: Window) -> Result<Outlet> {
        self.op(AvgPool2d { window }.into(), &[x])
    }
}
