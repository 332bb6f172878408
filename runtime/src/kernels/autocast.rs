//! Mixed precision's contractions (`Precision::Bf16Mixed`): the ops whose arithmetic is a
//! sum of products take their operands in bfloat16 and give back their result in the
//! working dtype, as `torch.autocast` does for the same ops. Tensor cores multiply
//! bfloat16 at twice TF32's rate and the operands move half the bytes; the sums stay f32
//! inside the kernel (cubek's matmul accumulates in f32, flex converts to f32 and back),
//! and every value between contractions stays f32, so normalization statistics, softmax,
//! the loss and the optimizer's update see f32. The result's bfloat16 rounding is kept
//! (cast back, not recomputed), so every device rounds at the same places.

use super::KernelCtx;
use crate::value::{B, T};
use burn::backend::ops::FloatTensorOps;
use burn::tensor::FloatDType;
use engine_graph::Op;

/// Whether `op` is a contraction, whose operands mixed precision narrows. The CPU's native
/// kernels compute in f32 and decline these under mixed precision.
pub(crate) fn contracts(op: &Op) -> bool {
    matches!(
        op,
        Op::MatMul(_)
            | Op::FusedMatMul(_)
            | Op::Conv2d(_)
            | Op::FusedConv2d(_)
            | Op::FusedConv2dMaxPool(_)
            | Op::Conv2dBackpropInput(_)
            | Op::FusedConv2dBackpropInput(_)
            | Op::Conv2dBackpropFilter(_)
            | Op::FusedMaxPoolConv2dBackpropFilter(_)
            | Op::FusedAttention(_)
            | Op::FusedAttentionGrad(_)
    )
}

/// The dtype a contraction's operands and temporaries take.
pub(super) fn dtype(ctx: &KernelCtx<'_>) -> FloatDType {
    ctx.precision.contraction_dtype().unwrap_or(ctx.precision.dtype())
}

/// `t` as a contraction's operand.
pub(super) fn operand(t: T, ctx: &KernelCtx<'_>) -> T {
    match ctx.precision.contraction_dtype() {
        Some(d) => B::float_cast(t, d),
        None => t,
    }
}

/// A contraction's result in the working dtype.
pub(super) fn result(t: T, ctx: &KernelCtx<'_>) -> T {
    match ctx.precision.contraction_dtype() {
        Some(_) => B::float_cast(t, ctx.precision.dtype()),
        None => t,
    }
}

/// `a · b` (batched over leading axes) with mixed precision's operands and result.
pub(super) fn matmul(a: T, b: T, ctx: &KernelCtx<'_>) -> T {
    result(B::float_matmul(operand(a, ctx), operand(b, ctx)), ctx)
}
