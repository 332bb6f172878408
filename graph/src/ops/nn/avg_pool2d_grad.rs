//! The backward of `AvgPool2d`: each output gradient spread evenly over its window.

use super::padding::{Window, nhwc, spatial};
use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

/// Input: the gradient of the pooled values; the pool input's spatial size is an attribute.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AvgPool2dGrad {
    pub input_hw: [usize; 2],
    pub window: Window,
}

impl OpDef for AvgPool2dGrad {
    fn name(&self) -> &'static str {
        "AvgPoolGrad"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let gy = &inputs[0];
        let (ohw, _) = self.window.output(self.input_hw)?;
        if spatial(gy, "output gradient")? != ohw {
            return Err(format!("gradient {} does not match pooling {:?}", gy.shape, self.input_hw));
        }
        Ok(vec![Fact::f32(nhwc(gy.shape.dim(0), self.input_hw, gy.shape.dim(3)))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // Linear, and the adjoint of average pooling.
        let gg = ctx.out_grad(0)?;
        let g = ctx.b.avg_pool2d(gg, self.window)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn avg_pool2d_grad(&mut self, gy: Outlet, input_hw: [usize; 2], window: Window) -> Result<Outlet> {
        self.op(AvgPool2dGrad { input_hw, window }.into(), &[gy])
    }
}
