//! Convolutions: as GEMMs in the graph's NHWC/HWIO layout (`conv_gemm`) where they
//! apply, else (grouped or dilated) the layout mapped to burn's NCHW/OIHW kernels.

use super::{KernelCtx, autocast, conv_gemm, dims};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::ops::{ConvOptions, FloatTensorOps, ModuleOps};
use burn::tensor::Shape as BurnShape;
use engine_graph::ops::{Conv2d, Conv2dBackpropFilter, Conv2dBackpropInput};

const NHWC_TO_NCHW: [usize; 4] = [0, 3, 1, 2];
const NCHW_TO_NHWC: [usize; 4] = [0, 2, 3, 1];
const HWIO_TO_OIHW: [usize; 4] = [3, 2, 0, 1];
const OIHW_TO_HWIO: [usize; 4] = [2, 3, 1, 0];

fn options(c: &Conv2d, kernel: [usize; 2], hw: [usize; 2], ctx: &KernelCtx<'_>) -> Result<ConvOptions<2>> {
    let (_, p) = c.window(kernel).output(hw).map_err(|e| ctx.err(e))?;
    Ok(ConvOptions { stride: c.strides, padding: [(p[0], p[1]), (p[2], p[3])], dilation: c.dilation, groups: c.groups })
}

/// The GEMM form's geometry and examples per GEMM, where it applies (ungrouped and
/// undilated) and is chosen for the pass (`conv_gemm::prefer_gemm`, given the pass's
/// output values and products per output), and one example's patch values fit the
/// device's largest buffer. `sizes` gives the pass's (outputs, products per output, patch
/// values per example).
fn gemm(
    c: &Conv2d,
    kernel: [usize; 2],
    in_hw: [usize; 2],
    sizes: impl Fn(&conv_gemm::Geometry) -> (usize, usize, usize),
    batch: usize,
    ctx: &KernelCtx<'_>,
) -> Result<Option<(conv_gemm::Geometry, usize)>> {
    let Some(g) = conv_gemm::Geometry::new(c, kernel, in_hw).map_err(|e| ctx.err(e))? else { return Ok(None) };
    let (outputs, depth, per_example) = sizes(&g);
    if !conv_gemm::prefer_gemm(outputs, depth) {
        return Ok(None);
    }
    let budget = ctx.max_buffer.unwrap_or(u64::MAX).min(conv_gemm::MOST_PATCH_BYTES) / ctx.precision.float_bytes();
    Ok(conv_gemm::batch_chunk(batch, per_example, budget).map(|chunk| (g, chunk)))
}

pub(super) fn forward(c: &Conv2d, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x, w] = ctx.floats(inputs)?;
    let (x, w) = (autocast::operand(x, ctx), autocast::operand(w, ctx));
    Ok(autocast::result(forward_in(c, x, w, ctx)?, ctx))
}

fn forward_in(c: &Conv2d, x: T, w: T, ctx: &KernelCtx<'_>) -> Result<T> {
    let (xd, wd) = (dims(&x), dims(&w));
    if let Some((g, chunk)) = gemm(
        c,
        [wd[0], wd[1]],
        [xd[1], xd[2]],
        |g| (g.outputs(xd[0], wd[3]), wd[0] * wd[1] * xd[3], g.patch_values(xd[3])),
        xd[0],
        ctx,
    )? {
        return Ok(conv_gemm::forward(x, w, &g, chunk));
    }
    let opts = options(c, [wd[0], wd[1]], [xd[1], xd[2]], ctx)?;
    let x = B::float_permute(x, &NHWC_TO_NCHW);
    let w = B::float_permute(w, &HWIO_TO_OIHW);
    Ok(B::float_permute(B::conv2d(x, w, None, opts), &NCHW_TO_NHWC))
}

pub(super) fn backprop_input(c: &Conv2dBackpropInput, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [w, gy] = ctx.floats(inputs)?;
    let (w, gy) = (autocast::operand(w, ctx), autocast::operand(gy, ctx));
    Ok(autocast::result(backprop_input_in(c, w, gy, ctx)?, ctx))
}

fn backprop_input_in(c: &Conv2dBackpropInput, w: T, gy: T, ctx: &KernelCtx<'_>) -> Result<T> {
    let (wd, gd) = (dims(&w), dims(&gy));
    if let Some((g, chunk)) = gemm(
        &c.conv(),
        [wd[0], wd[1]],
        c.input_hw,
        |g| (gd[0] * c.input_hw[0] * c.input_hw[1] * wd[2], wd[0] * wd[1] * gd[3], g.input_grad_patch_values(gd[3])),
        gd[0],
        ctx,
    )? {
        return Ok(conv_gemm::input_grad(w, gy, &g, chunk));
    }
    let opts = options(&c.conv(), [wd[0], wd[1]], c.input_hw, ctx)?;
    // burn reads only the shape of `x` here.
    let x_shape = BurnShape::from(vec![gd[0], wd[2] * c.groups, c.input_hw[0], c.input_hw[1]]);
    let x = B::float_zeros(x_shape, ctx.device, autocast::dtype(ctx));
    let w = B::float_permute(w, &HWIO_TO_OIHW);
    let gy = B::float_permute(gy, &NHWC_TO_NCHW);
    Ok(B::float_permute(B::conv2d_x_backward(x, w, gy, opts), &NCHW_TO_NHWC))
}

pub(super) fn backprop_filter(c: &Conv2dBackpropFilter, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x, gy] = ctx.floats(inputs)?;
    let (x, gy) = (autocast::operand(x, ctx), autocast::operand(gy, ctx));
    Ok(autocast::result(backprop_filter_in(c, x, gy, ctx)?, ctx))
}

fn backprop_filter_in(c: &Conv2dBackpropFilter, x: T, gy: T, ctx: &KernelCtx<'_>) -> Result<T> {
    let (xd, gd) = (dims(&x), dims(&gy));
    if let Some((g, chunk)) = gemm(
        &c.conv(),
        c.filter_hw,
        [xd[1], xd[2]],
        |g| (c.filter_hw[0] * c.filter_hw[1] * xd[3] * gd[3], xd[0] * gd[1] * gd[2], g.patch_values(xd[3])),
        xd[0],
        ctx,
    )? {
        return Ok(conv_gemm::filter_grad(x, gy, &g, chunk));
    }
    let opts = options(&c.conv(), c.filter_hw, [xd[1], xd[2]], ctx)?;
    // burn reads only the shape of the weight here.
    let w_shape = BurnShape::from(vec![gd[3], xd[3] / c.groups.max(1), c.filter_hw[0], c.filter_hw[1]]);
    let w = B::float_zeros(w_shape, ctx.device, autocast::dtype(ctx));
    let x = B::float_permute(x, &NHWC_TO_NCHW);
    let gy = B::float_permute(gy, &NHWC_TO_NCHW);
    Ok(B::float_permute(B::conv2d_weight_backward(x, w, gy, opts), &OIHW_TO_HWIO))
}

pub(super) fn to_nchw(t: T) -> T {
    B::float_permute(t, &NHWC_TO_NCHW)
}

pub(super) fn to_nhwc(t: T) -> T {
    B::float_permute(t, &NCHW_TO_NHWC)
}

pub(super) const INT_NHWC_TO_NCHW: [usize; 4] = NHWC_TO_NCHW;
pub(super) const INT_NCHW_TO_NHWC: [usize; 4] = NCHW_TO_NHWC;
