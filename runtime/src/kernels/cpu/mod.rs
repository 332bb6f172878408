//! Native CPU kernels in the graph's own NHWC layout.
//!
//! burn's CPU convolutions and pooling are NCHW, so every call paid two transposes, and
//! its broadcasting paths iterate strided; on the tutorial CNN that made a training step
//! ten times slower than TensorFlow's. These kernels read flex's storage in place (no
//! copy), lower convolution to patch matrices times the filter with the `gemm` crate,
//! pool directly in NHWC, and write in place into inputs the executor handed over for
//! the last time. They run whenever the device is the CPU; other devices use the generic
//! burn kernels, which the tests check against these.

mod attention;
mod batch_statistics;
mod buffer;
mod conv;
mod conv_pool;
mod direct_conv;
mod dropout;
mod elementwise;
mod fused_elementwise;
mod gemm;
mod matmul;
mod microkernel;
mod microkernel512;
mod norm_sums;
mod normalization;
mod numerics;
#[cfg(target_arch = "x86_64")]
mod packed_gemm;
mod patches;
mod phase_input_grad;
mod pool;
mod pooled_conv;
mod reduce;
mod simd;
mod softmax;
mod unpool512;
mod update_loops;
mod vmath;
mod winograd;
mod winograd4;
mod winograd4_512;
mod winograd512;

pub(crate) use gemm::large_f32_kernel;
#[cfg(target_arch = "x86_64")]
pub use simd::has_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use simd::has_avx512;

use super::KernelCtx;
use crate::{Precision, Result, Value};
use burn::backend::DispatchDevice;
use engine_graph::Op;

/// `Ok(outputs)` if a native kernel ran, `Err(inputs)` (unchanged) if the op or its
/// inputs are not ones these kernels handle.
pub(super) type Outcome = std::result::Result<Result<Vec<Value>>, Vec<Value>>;

pub(super) fn try_run(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Outcome {
    if !matches!(ctx.device, DispatchDevice::Flex(_)) || !inputs.iter().all(|v| buffer::is_native(v, ctx.precision)) {
        return Err(inputs);
    }
    // Mixed precision's contractions run burn's kernels in bfloat16 (`super::autocast`).
    if ctx.precision.narrows(op) {
        return Err(inputs);
    }
    match ctx.precision {
        Precision::F32 | Precision::Bf16Mixed => dispatch::<f32>(op, inputs, ctx),
        Precision::F64 => dispatch::<f64>(op, inputs, ctx),
    }
}

/// NaN and infinity counts of a float value read in place, if it is a native buffer.
pub(super) fn non_finite(v: &Value, ctx: &KernelCtx<'_>) -> Option<(usize, usize)> {
    let Value::Float(t) = v else { return None };
    if !matches!(ctx.device, DispatchDevice::Flex(_)) || !buffer::is_native(v, ctx.precision) {
        return None;
    }
    Some(match ctx.precision {
        Precision::F32 | Precision::Bf16Mixed => numerics::non_finite::<f32>(t),
        Precision::F64 => numerics::non_finite::<f64>(t),
    })
}

fn dispatch<E: buffer::Elem>(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Outcome {
    let float = |r: Result<crate::value::T>| Ok(r.map(|t| vec![Value::Float(t)]));
    match op {
        // Dilated and grouped convolutions run burn's kernels.
        Op::Conv2d(c) if c.is_plain() => float(conv::forward::<E>(c, inputs, ctx)),
        Op::Conv2dBackpropFilter(c) if c.conv().is_plain() => Ok(conv::backprop_filter::<E>(c, inputs, ctx)),
        Op::FusedConv2d(c) => float(conv::fused::<E>(c, inputs, ctx)),
        Op::FusedConv2dMaxPool(c) => Ok(conv_pool::forward::<E>(c, inputs, ctx)),
        Op::FusedMaxPoolConv2dBackpropFilter(c) => Ok(conv_pool::backprop_filter::<E>(c, inputs, ctx)),
        Op::MaxPoolGradWithArgmax(m) => float(pool::max_backward_with_argmax::<E>(m, inputs, ctx)),
        Op::FusedMatMul(m) => float(matmul::fused::<E>(m, inputs, ctx)),
        Op::Conv2dBackpropInput(c) if c.conv().is_plain() => float(conv::backprop_input::<E>(c, inputs, ctx)),
        Op::FusedConv2dBackpropInput(c) if c.input_grad.conv().is_plain() => {
            float(conv::fused_backprop_input::<E>(c, inputs, ctx))
        }
        Op::MaxPool2d(p) => Ok(pool::max_forward::<E>(&p.window, inputs, ctx)),
        Op::MaxPool2dGrad(p) => float(pool::max_backward::<E>(&p.window, p.relu_mask, inputs, ctx)),
        Op::AvgPool2d(p) => float(pool::avg_forward::<E>(&p.window, inputs, ctx)),
        Op::AvgPool2dGrad(p) => float(pool::avg_backward::<E>(p, inputs, ctx)),
        Op::MatMul(m) => float(matmul::matmul::<E>(m, inputs, ctx)),
        Op::Add(_) | Op::Sub(_) | Op::Mul(_) | Op::Div(_) | Op::Maximum(_) | Op::Minimum(_) => {
            elementwise::binary::<E>(op, inputs, ctx)
        }
        Op::Relu(_) | Op::ReluGrad(_) => float(elementwise::relu::<E>(op, inputs, ctx)),
        Op::FusedElementwise(f) => fused_elementwise::fused::<E>(f, inputs, ctx),
        Op::Dropout(d) => Ok(dropout::run::<E>(d, inputs, ctx)),
        Op::Erf(_) => erf::<E>(inputs, ctx),
        Op::FusedNormalization(n) => Ok(normalization::forward::<E>(n, inputs, ctx)),
        Op::FusedNormalizationGrad(n) => Ok(normalization::backward::<E>(n, inputs, ctx)),
        Op::FusedAttention(a) => Ok(attention::forward::<E>(a, inputs, ctx)),
        Op::FusedAttentionGrad(a) => Ok(attention::backward::<E>(a, inputs, ctx)),
        Op::Softmax(s) => softmax::softmax::<E>(s.axis, false, inputs, ctx).and_then(float),
        Op::LogSoftmax(s) => softmax::softmax::<E>(s.axis, true, inputs, ctx).and_then(float),
        Op::SparseSoftmaxCrossEntropy(_) => float(softmax::sparse_cross_entropy::<E>(inputs, ctx)),
        Op::ReduceSum(r) => reduce::sum::<E>(&r.axes, false, inputs, ctx),
        Op::ReduceMean(r) => reduce::sum::<E>(&r.axes, true, inputs, ctx),
        _ => Err(inputs),
    }
}

/// `erf` in place over a float the executor handed over (f32 only: `vmath`'s vectorized
/// erf; f64 goes to burn's).
fn erf<E: buffer::Elem>(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Outcome {
    use rayon::prelude::*;
    if std::any::TypeId::of::<E>() != std::any::TypeId::of::<f32>() {
        return Err(inputs);
    }
    let Ok([Value::Float(x)]) = <[Value; 1]>::try_from(inputs) else { return Ok(Err(ctx.err("expected one float"))) };
    let shape = super::dims(&x);
    let mut v = buffer::into_vec::<E>(x);
    if let Some(xs) = buffer::as_f32_mut(&mut v) {
        let per = buffer::chunks(xs.len()).max(4096);
        xs.par_chunks_mut(per).for_each(vmath::erf_in_place);
    }
    Ok(Ok(vec![Value::Float(buffer::tensor(v, &shape, ctx.device))]))
}
