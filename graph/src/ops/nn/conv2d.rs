//! 2-D convolution: NHWC input, HWIO filter (no bias: a bias is an `Add`), optionally
//! dilated (atrous) and grouped (depthwise when there are as many groups as channels).

use super::{
    Conv2dBackpropFilter, Conv2dBackpropInput,
    padding::{Padding, Window, nhwc, spatial},
};
use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Conv2d {
    pub strides: [usize; 2],
    pub padding: Padding,
    /// Filter taps `dilation` pixels apart (1: adjacent).
    #[serde(default = "adjacent")]
    pub dilation: [usize; 2],
    /// Channels split into `groups` independent convolutions: the filter is
    /// `[kh, kw, in / groups, out]`, output channels `g * out / groups ..` read input
    /// channels `g * in / groups ..`.
    #[serde(default = "one")]
    pub groups: usize,
}

pub(crate) fn adjacent() -> [usize; 2] {
    [1, 1]
}

pub(crate) fn one() -> usize {
    1
}

impl Conv2d {
    pub fn plain(strides: [usize; 2], padding: Padding) -> Self {
        Conv2d { strides, padding, dilation: adjacent(), groups: 1 }
    }

    /// Neither dilated nor grouped: what the native CPU kernels and fusions handle.
    pub fn is_plain(&self) -> bool {
        self.dilation == adjacent() && self.groups == 1
    }

    /// The window the filter spans: `(k - 1) * dilation + 1` pixels.
    pub fn window(&self, filter_hw: [usize; 2]) -> Window {
        let span = |a: usize| filter_hw[a].saturating_sub(1) * self.dilation[a] + 1;
        Window { kernel: [span(0), span(1)], strides: self.strides, padding: self.padding }
    }

    pub fn backprop_input(&self, input_hw: [usize; 2]) -> Conv2dBackpropInput {
        Conv2dBackpropInput {
            input_hw,
            strides: self.strides,
            padding: self.padding,
            dilation: self.dilation,
            groups: self.groups,
        }
    }

    pub fn backprop_filter(&self, filter_hw: [usize; 2]) -> Conv2dBackpropFilter {
        Conv2dBackpropFilter {
            filter_hw,
            strides: self.strides,
            padding: self.padding,
            with_bias: false,
            dilation: self.dilation,
            groups: self.groups,
        }
    }
}

/// Checks a filter `[kh, kw, in / groups, out]` against `in` channels; returns
/// `([kh, kw], out)`.
pub(crate) fn filter_dims(w: &Fact, in_channels: Dim, groups: usize) -> Result<([usize; 2], usize), String> {
    rules::expect_dtype(w, DType::F32, "filter")?;
    let dims = w.shape.as_known().filter(|d| d.len() == 4);
    let d =
        dims.ok_or_else(|| format!("filter must be [height, width, in, out] with known sizes, found {}", w.shape))?;
    if groups == 0 || d[3] % groups != 0 {
        return Err(format!("{} output channels do not split into {groups} groups", d[3]));
    }
    if Dim::Known(d[2] * groups) != in_channels {
        return Err(format!(
            "filter expects {} input channels ({} per group), input has {in_channels}",
            d[2] * groups,
            d[2]
        ));
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
        let (k, out) = filter_dims(w, x.shape.dim(3), self.groups)?;
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
            let g = ctx.b.op(self.backprop_input(hw).into(), &[w, gy])?;
            ctx.set(0, g);
        }
        if ctx.needs(1) {
            let d = w_fact.shape.as_known().ok_or_else(|| ctx.no_gradient())?;
            let g = ctx.b.op(self.backprop_filter([d[0], d[1]]).into(), &[x, gy])?;
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
        self.op(Conv2d::plain(strides, padding).into(), &[x, w])
    }

    /// A dilated and/or grouped convolution.
    pub fn conv2d_general(&mut self, x: Outlet, w: Outlet, conv: Conv2d) -> Result<Outlet> {
        self.op(conv.into(), &[x, w])
    }
}
