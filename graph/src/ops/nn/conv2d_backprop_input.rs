//! The gradient of `Conv2d` with respect to its input (a transposed convolution).

use super::{
    Conv2d,
    conv2d::{adjacent, filter_dims, one},
    padding::{Padding, nhwc},
};
use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Inputs: `(filter, gradient of the output)`; the input's spatial size is an attribute
/// because strided convolutions lose it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Conv2dBackpropInput {
    pub input_hw: [usize; 2],
    pub strides: [usize; 2],
    pub padding: Padding,
    #[serde(default = "adjacent")]
    pub dilation: [usize; 2],
    #[serde(default = "one")]
    pub groups: usize,
}

impl Conv2dBackpropInput {
    /// The forward convolution this is the input gradient of.
    pub fn conv(&self) -> Conv2d {
        Conv2d { strides: self.strides, padding: self.padding, dilation: self.dilation, groups: self.groups }
    }
}

impl OpDef for Conv2dBackpropInput {
    fn name(&self) -> &'static str {
        "Conv2DBackpropInput"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (w, gy) = (&inputs[0], &inputs[1]);
        rules::expect_dtype(gy, DType::F32, "output gradient")?;
        rules::expect_rank(gy, 4, "output gradient")?;
        let per_group = w.shape.as_known().and_then(|d| d.get(2).copied()).ok_or("filter must have known sizes")?;
        let in_c = per_group * self.groups;
        let (k, out) = filter_dims(w, Dim::Known(in_c), self.groups)?;
        let conv = self.conv();
        let (ohw, _) = conv.window(k).output(self.input_hw)?;
        let expected = nhwc(gy.shape.dim(0), ohw, Dim::Known(out));
        if gy.shape != expected {
            return Err(format!("output gradient must be {expected}, found {}", gy.shape));
        }
        Ok(vec![Fact::f32(nhwc(gy.shape.dim(0), self.input_hw, Dim::Known(in_c)))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // Bilinear in (filter, gy): <ggx, BI(w, gy)> = <gy, conv(ggx, w)>.
        let ggx = ctx.out_grad(0)?;
        let (w, gy) = (ctx.input(0), ctx.input(1));
        let k = ctx.input_fact(0)?.shape.as_known().unwrap_or_default();
        if ctx.needs(1) {
            let g = ctx.b.conv2d_general(ggx, w, self.conv())?;
            ctx.set(1, g);
        }
        if ctx.needs(0) {
            let g = ctx.b.op(self.conv().backprop_filter([k[0], k[1]]).into(), &[ggx, gy])?;
            ctx.set(0, g);
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        let w = inputs[0].shape.as_known().unwrap_or_default();
        2 * (inputs[1].shape.num_elements(batch) * w.iter().take(3).product::<usize>()) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn conv2d_backprop_input(
        &mut self,
        w: Outlet,
        gy: Outlet,
        input_hw: [usize; 2],
        strides: [usize; 2],
        padding: Padding,
    ) -> Result<Outlet> {
        self.op(Conv2d::plain(strides, padding).backprop_input(input_hw).into(), &[w, gy])
    }
}
