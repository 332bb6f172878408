//! 2-D convolution: NHWC input, HWIO filter (no bias: a bias is an `Add`).

use super::padding::{Padding, Window, nhwc, spatial};
use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Conv2d {
    pub strides: [usize; 2],
    pub padding: Padding,
}

impl Conv2d {
    pub fn window(&self, filter_hw: [usize; 2]) -> Window {
        Window { kernel: filter_hw, strides: self.strides, padding: self.padding }
    }
}

/// Checks a filter `[kh, kw, in, out]` against `in` channels; returns `([kh, kw], out)`.
pub(crate) fn filter_dims(w: &Fact, in_channels: Dim) -> Result<([usize; 2], usize), String> {
    rules::expect_dtype(w, DType::F32, "filter")?;
    let dims = w.shape.as_known().filter(|d| d.len() == 4);
    let d =
        dims.ok_or_else(|| format!("filter must be [height, width, in, out] with known sizes, found {}", w.shape))?;
    if Dim::Known(d[2]) != in_channels {
        return Err(format!("filter expects {} input channels, input has {in_channels}", d[2]));
    }
    Ok(([d[0], d[1]], d[3]))
}

impl OpDef for Conv2d {
    fn name(&self) -> &'static str {
        "Conv2D"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (x, w) = (&inputs[0], &inputs[1]);
        rules::expect_dtype(x, DType::F32, "input")?;
        let hw = spatial(x, "input")?;
        let (k, out) = filter_dims(w, x.shape.dim(3))?;
        let (ohw, _) = self.window(k).output(hw)?;
        Ok(vec![Fact::f32(nhwc(x.shape.dim(0), ohw, Dim::Known(out)))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let (x, w) = (ctx.input(0), ctx.input(1));
        let x_fact = ctx.input_fact(0)?;
        let w_fact = ctx.input_fact(1)?;
        if ctx.needs(0) {
            let hw = spatial(&x_fact, "input").map_err(|_| ctx.no_gradient())?;
            let g = ctx.b.conv2d_backprop_input(w, gy, hw, self.strides, self.padding)?;
            ctx.set(0, g);
        }
        if ctx.needs(1) {
            let d = w_fact.shape.as_known().ok_or_else(|| ctx.no_gradient())?;
            let g = ctx.b.conv2d_backprop_filter(x, gy, [d[0], d[1]], self.strides, self.padding)?;
            ctx.set(1, g);
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        let w = inputs[1].shape.as_known().unwrap_or_default();
        let per_output: usize = w.iter().take(3).product();
        2 * (outputs[0].shape.num_elements(batch) * per_output) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn conv2d(&mut self, x: Outlet, w: Outlet, strides: [usize; 2], padding: Padding) -> Result<Outlet> {
        self.op(Conv2d { strides, padding }.into(), &[x, w])
    }
}
