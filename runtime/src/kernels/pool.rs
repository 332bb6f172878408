//! Pooling in TensorFlow's semantics on burn's NCHW kernels.
//!
//! Symmetric padding maps onto burn's padding argument. TensorFlow's SAME padding is
//! asymmetric when the total is odd (the extra cell goes after); then max pooling pads
//! with -inf explicitly, and average pooling divides window sums by the count of real
//! cells, which is what TensorFlow's average over valid cells means.

use super::{
    KernelCtx,
    conv::{INT_NCHW_TO_NHWC, INT_NHWC_TO_NCHW, to_nchw, to_nhwc},
    dims,
    shape::{pad_with, zero_pad},
};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::ops::{ActivationOps, FloatTensorOps, IntTensorOps, ModuleOps};
use burn::tensor::{Shape as BurnShape, Slice};
use engine_graph::ops::{AvgPool2dGrad, MaxPool2d, MaxPool2dGrad, MaxPoolGradWithArgmax, Window};

/// `[top, bottom, left, right]` pads and whether burn's symmetric padding can express them.
fn pads(w: &Window, hw: [usize; 2], ctx: &KernelCtx<'_>) -> Result<([usize; 4], bool)> {
    let (_, p) = w.output(hw).map_err(|e| ctx.err(e))?;
    Ok((p, p[0] == p[1] && p[2] == p[3]))
}

fn spatial_pads(p: [usize; 4]) -> [(usize, usize); 4] {
    [(0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])]
}

fn crop(t: T, p: [usize; 4], hw: [usize; 2]) -> T {
    let d = dims(&t);
    let s = |b: usize, n: usize| Slice::new(b as isize, Some((b + n) as isize), 1);
    B::float_slice(t, &[s(0, d[0]), s(0, d[1]), s(p[0], hw[0]), s(p[2], hw[1])])
}

pub(super) fn max_forward(m: &MaxPool2d, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [x] = ctx.floats(inputs)?;
    let xd = dims(&x);
    let (p, symmetric) = pads(&m.window, [xd[1], xd[2]], ctx)?;
    let mut x = to_nchw(x);
    let pad = if symmetric {
        [p[0], p[2]]
    } else {
        x = pad_with(x, &spatial_pads(p), f32::NEG_INFINITY);
        [0, 0]
    };
    let r = B::max_pool2d_with_indices(x, m.window.kernel, m.window.strides, pad, [1, 1], false, ctx.index_dtype());
    Ok(vec![Value::Float(to_nhwc(r.output)), Value::Int(B::int_permute(r.indices, &INT_NCHW_TO_NHWC))])
}

pub(super) fn max_backward(m: &MaxPool2dGrad, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let mut it = inputs.into_iter();
    let x = ctx.float(it.next().ok_or_else(|| ctx.err("missing input"))?)?;
    let Some(Value::Int(idx)) = it.next() else { return Err(ctx.err("argmax positions must be integers")) };
    let gy = ctx.float(it.next().ok_or_else(|| ctx.err("missing gradient"))?)?;
    let xd = dims(&x);
    let hw = [xd[1], xd[2]];
    let (p, symmetric) = pads(&m.window, hw, ctx)?;
    let mut x = to_nchw(x);
    let pad = if symmetric {
        [p[0], p[2]]
    } else {
        x = pad_with(x, &spatial_pads(p), f32::NEG_INFINITY);
        [0, 0]
    };
    let idx = B::int_permute(idx, &INT_NHWC_TO_NCHW);
    let r =
        B::max_pool2d_with_indices_backward(x, m.window.kernel, m.window.strides, pad, [1, 1], false, to_nchw(gy), idx);
    let g = if symmetric { r.x_grad } else { crop(r.x_grad, p, hw) };
    Ok(to_nhwc(g))
}

/// The pool's input gradient from the pooled values, argmax and pooled gradient: burn's
/// backward on a zero tensor of the input's shape (it reads only the shape), the ReLU mask
/// applied to the pooled gradient first.
pub(super) fn max_backward_with_argmax(
    m: &MaxPoolGradWithArgmax,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<T> {
    let mut it = inputs.into_iter();
    let pooled = ctx.float(it.next().ok_or_else(|| ctx.err("missing pooled values"))?)?;
    let Some(Value::Int(idx)) = it.next() else { return Err(ctx.err("argmax positions must be integers")) };
    let gy = ctx.float(it.next().ok_or_else(|| ctx.err("missing gradient"))?)?;
    let gy = if m.relu_mask { B::relu_backward(pooled, gy) } else { gy };
    let gd = dims(&gy);
    let hw = m.input_hw;
    let (p, symmetric) = pads(&m.window, hw, ctx)?;
    let (padded, pad) =
        if symmetric { (hw, [p[0], p[2]]) } else { ([hw[0] + p[0] + p[1], hw[1] + p[2] + p[3]], [0, 0]) };
    let x =
        B::float_zeros(BurnShape::from(vec![gd[0], gd[3], padded[0], padded[1]]), ctx.device, ctx.precision.dtype());
    let idx = B::int_permute(idx, &INT_NHWC_TO_NCHW);
    let r =
        B::max_pool2d_with_indices_backward(x, m.window.kernel, m.window.strides, pad, [1, 1], false, to_nchw(gy), idx);
    let g = if symmetric { r.x_grad } else { crop(r.x_grad, p, hw) };
    Ok(to_nhwc(g))
}

/// Window element counts `[1, 1, OH, OW]` that exclude padding (asymmetric case).
fn valid_counts(w: &Window, hw: [usize; 2], p: [usize; 4], ctx: &KernelCtx<'_>) -> T {
    let ones = B::float_ones(BurnShape::from(vec![1, 1, hw[0], hw[1]]), ctx.device, ctx.precision.dtype());
    let area = (w.kernel[0] * w.kernel[1]) as f64;
    let mean = B::avg_pool2d(zero_pad(ones, &spatial_pads(p)), w.kernel, w.strides, [0, 0], true, false);
    B::float_mul_scalar(mean, area.into())
}

pub(super) fn avg_forward(w: &Window, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x] = ctx.floats(inputs)?;
    let xd = dims(&x);
    let hw = [xd[1], xd[2]];
    let (p, symmetric) = pads(w, hw, ctx)?;
    let x = to_nchw(x);
    if symmetric {
        return Ok(to_nhwc(B::avg_pool2d(x, w.kernel, w.strides, [p[0], p[2]], false, false)));
    }
    let area = (w.kernel[0] * w.kernel[1]) as f64;
    let sums = B::float_mul_scalar(
        B::avg_pool2d(zero_pad(x, &spatial_pads(p)), w.kernel, w.strides, [0, 0], true, false),
        area.into(),
    );
    Ok(to_nhwc(B::float_div(sums, valid_counts(w, hw, p, ctx))))
}

pub(super) fn avg_backward(a: &AvgPool2dGrad, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [gy] = ctx.floats(inputs)?;
    let gd = dims(&gy);
    let w = &a.window;
    let hw = a.input_hw;
    let (p, symmetric) = pads(w, hw, ctx)?;
    let gy = to_nchw(gy);
    let dtype = ctx.precision.dtype();
    if symmetric {
        let x = B::float_zeros(BurnShape::from(vec![gd[0], gd[3], hw[0], hw[1]]), ctx.device, dtype);
        return Ok(to_nhwc(B::avg_pool2d_backward(x, gy, w.kernel, w.strides, [p[0], p[2]], false, false)));
    }
    let area = (w.kernel[0] * w.kernel[1]) as f64;
    let scaled = B::float_mul_scalar(B::float_div(gy, valid_counts(w, hw, p, ctx)), area.into());
    let padded = [gd[0], gd[3], hw[0] + p[0] + p[1], hw[1] + p[2] + p[3]];
    let x = B::float_zeros(BurnShape::from(padded.to_vec()), ctx.device, dtype);
    let g = B::avg_pool2d_backward(x, scaled, w.kernel, w.strides, [0, 0], true, false);
    Ok(to_nhwc(crop(g, p, hw)))
}
