//! Convolutions, each pass in the form `conv_form` chooses: a GEMM in the graph's
//! NHWC/HWIO layout (`conv_gemm`), cubek's implicit GEMM (`conv_implicit`), or burn's
//! direct kernels through NCHW/OIHW views (every pass, grouped and dilated ones too).

use super::conv_form::{self, Form, Pass};
use super::{KernelCtx, autocast, conv_gemm, conv_implicit, dims};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::TensorMetadata;
use burn::backend::ops::{ConvOptions, FloatTensorOps, ModuleOps};
use burn::tensor::Shape as BurnShape;
use engine_graph::ops::{Conv2d, Conv2dBackpropFilter, Conv2dBackpropInput};

pub(super) const NHWC_TO_NCHW: [usize; 4] = [0, 3, 1, 2];
pub(super) const NCHW_TO_NHWC: [usize; 4] = [0, 2, 3, 1];
pub(super) const HWIO_TO_OIHW: [usize; 4] = [3, 2, 0, 1];
pub(super) const OIHW_TO_HWIO: [usize; 4] = [2, 3, 1, 0];

fn options(c: &Conv2d, kernel: [usize; 2], hw: [usize; 2], ctx: &KernelCtx<'_>) -> Result<ConvOptions<2>> {
    let (_, p) = c.window(kernel).output(hw).map_err(|e| ctx.err(e))?;
    Ok(ConvOptions { stride: c.strides, padding: [(p[0], p[1]), (p[2], p[3])], dilation: c.dilation, groups: c.groups })
}

/// The GEMM form's geometry and examples per GEMM, where it applies: ungrouped and
/// undilated, and one example's patch values (`per_example`) fit the device's largest
/// buffer.
fn gemm(
    c: &Conv2d,
    kernel: [usize; 2],
    in_hw: [usize; 2],
    per_example: impl Fn(&conv_gemm::Geometry) -> usize,
    batch: usize,
    ctx: &KernelCtx<'_>,
) -> Result<Option<(conv_gemm::Geometry, usize)>> {
    let Some(g) = conv_gemm::Geometry::new(c, kernel, in_hw).map_err(|e| ctx.err(e))? else { return Ok(None) };
    let budget = ctx.max_buffer.unwrap_or(u64::MAX).min(conv_gemm::MOST_PATCH_BYTES) / ctx.precision.float_bytes();
    Ok(conv_gemm::batch_chunk(batch, per_example(&g), budget).map(|chunk| (g, chunk)))
}

/// A pass as `conv_form` chooses among its forms: `what` names the pass and its
/// operands' shapes, `outputs` and `depth` its output values and products per output.
fn pass(c: &Conv2d, what: String, gemm: bool, outputs: usize, depth: usize, like: &T) -> Pass {
    let implicit = conv_implicit::BUILT && c.groups == 1;
    Pass { key: format!("{what} {c:?} {:?}", like.dtype()), gemm, implicit, outputs, depth }
}

pub(super) fn forward(c: &Conv2d, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x, w] = ctx.floats(inputs)?;
    let (x, w) = (autocast::operand(x, ctx), autocast::operand(w, ctx));
    Ok(autocast::result(forward_in(c, x, w, ctx)?, ctx))
}

fn forward_in(c: &Conv2d, x: T, w: T, ctx: &KernelCtx<'_>) -> Result<T> {
    let (xd, wd) = (dims(&x), dims(&w));
    let (kernel, in_hw) = ([wd[0], wd[1]], [xd[1], xd[2]]);
    let opts = options(c, kernel, in_hw, ctx)?;
    let gemm = gemm(c, kernel, in_hw, |g| g.patch_values(xd[3]), xd[0], ctx)?;
    let outputs = gemm.map_or(0, |(g, _)| g.outputs(xd[0], wd[3]));
    let pass = pass(c, format!("forward x{xd:?} w{wd:?}"), gemm.is_some(), outputs, wd[0] * wd[1] * xd[3], &x);
    conv_form::run(&pass, ctx, &mut |form| {
        Ok(match form {
            Form::Gemm => gemm.map(|(g, chunk)| conv_gemm::forward(x.clone(), w.clone(), &g, chunk)),
            Form::Implicit => conv_implicit::forward(&x, &w, &opts),
            Form::Direct => {
                let x = B::float_permute(x.clone(), &NHWC_TO_NCHW);
                let w = B::float_permute(w.clone(), &HWIO_TO_OIHW);
                Some(B::float_permute(B::conv2d(x, w, None, opts.clone()), &NCHW_TO_NHWC))
            }
        })
    })
}

pub(super) fn backprop_input(c: &Conv2dBackpropInput, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [w, gy] = ctx.floats(inputs)?;
    let (w, gy) = (autocast::operand(w, ctx), autocast::operand(gy, ctx));
    Ok(autocast::result(backprop_input_in(c, w, gy, ctx)?, ctx))
}

fn backprop_input_in(c: &Conv2dBackpropInput, w: T, gy: T, ctx: &KernelCtx<'_>) -> Result<T> {
    let (wd, gd) = (dims(&w), dims(&gy));
    let conv = c.conv();
    let kernel = [wd[0], wd[1]];
    let opts = options(&conv, kernel, c.input_hw, ctx)?;
    let in_shape = [gd[0], c.input_hw[0], c.input_hw[1], wd[2] * c.groups];
    let gemm = gemm(&conv, kernel, c.input_hw, |g| g.input_grad_patch_values(gd[3]), gd[0], ctx)?;
    let outputs = gd[0] * c.input_hw[0] * c.input_hw[1] * wd[2];
    let what = format!("input gradient w{wd:?} gy{gd:?} x{in_shape:?}");
    let pass = pass(&conv, what, gemm.is_some(), outputs, wd[0] * wd[1] * gd[3], &gy);
    conv_form::run(&pass, ctx, &mut |form| {
        Ok(match form {
            Form::Gemm => gemm.map(|(g, chunk)| conv_gemm::input_grad(w.clone(), gy.clone(), &g, chunk)),
            Form::Implicit => conv_implicit::input_grad(&w, &gy, in_shape, &opts),
            Form::Direct => {
                // burn reads only the shape of `x` here.
                let x_shape = BurnShape::from(vec![in_shape[0], in_shape[3], in_shape[1], in_shape[2]]);
                let x = B::float_zeros(x_shape, ctx.device, autocast::dtype(ctx));
                let w = B::float_permute(w.clone(), &HWIO_TO_OIHW);
                let gy = B::float_permute(gy.clone(), &NHWC_TO_NCHW);
                Some(B::float_permute(B::conv2d_x_backward(x, w, gy, opts.clone()), &NCHW_TO_NHWC))
            }
        })
    })
}

pub(super) fn backprop_filter(c: &Conv2dBackpropFilter, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x, gy] = ctx.floats(inputs)?;
    let (x, gy) = (autocast::operand(x, ctx), autocast::operand(gy, ctx));
    Ok(autocast::result(backprop_filter_in(c, x, gy, ctx)?, ctx))
}

fn backprop_filter_in(c: &Conv2dBackpropFilter, x: T, gy: T, ctx: &KernelCtx<'_>) -> Result<T> {
    let (xd, gd) = (dims(&x), dims(&gy));
    let conv = c.conv();
    let in_hw = [xd[1], xd[2]];
    let opts = options(&conv, c.filter_hw, in_hw, ctx)?;
    let w_shape = [c.filter_hw[0], c.filter_hw[1], xd[3] / c.groups.max(1), gd[3]];
    let gemm = gemm(&conv, c.filter_hw, in_hw, |g| g.patch_values(xd[3]), xd[0], ctx)?;
    let outputs = c.filter_hw[0] * c.filter_hw[1] * xd[3] * gd[3];
    let what = format!("filter gradient x{xd:?} gy{gd:?} k{:?}", c.filter_hw);
    let pass = pass(&conv, what, gemm.is_some(), outputs, xd[0] * gd[1] * gd[2], &x);
    conv_form::run(&pass, ctx, &mut |form| {
        Ok(match form {
            Form::Gemm => gemm.map(|(g, chunk)| conv_gemm::filter_grad(x.clone(), gy.clone(), &g, chunk)),
            Form::Implicit => conv_implicit::filter_grad(&x, &gy, w_shape, &opts),
            Form::Direct => {
                // burn reads only the shape of the weight here.
                let w_shape = BurnShape::from(vec![w_shape[3], w_shape[2], w_shape[0], w_shape[1]]);
                let w = B::float_zeros(w_shape, ctx.device, autocast::dtype(ctx));
                let x = B::float_permute(x.clone(), &NHWC_TO_NCHW);
                let gy = B::float_permute(gy.clone(), &NHWC_TO_NCHW);
                Some(B::float_permute(B::conv2d_weight_backward(x, w, gy, opts.clone()), &OIHW_TO_HWIO))
            }
        })
    })
}

pub(super) fn to_nchw(t: T) -> T {
    B::float_permute(t, &NHWC_TO_NCHW)
}

pub(super) fn to_nhwc(t: T) -> T {
    B::float_permute(t, &NCHW_TO_NHWC)
}

pub(super) const INT_NHWC_TO_NCHW: [usize; 4] = NHWC_TO_NCHW;
pub(super) const INT_NCHW_TO_NHWC: [usize; 4] = NCHW_TO_NHWC;
