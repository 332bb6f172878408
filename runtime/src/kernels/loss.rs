//! Fused cross entropies, computed from log-softmax so that no logit overflows.

use super::{KernelCtx, logic::one_hot_of};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::TensorMetadata;
use burn::backend::ops::{ActivationOps, FloatTensorOps};
use engine_graph::Op;

pub(super) fn run(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    match op {
        Op::SparseSoftmaxCrossEntropy(_) => {
            let mut it = inputs.into_iter();
            let logits = ctx.float(it.next().ok_or_else(|| ctx.err("missing logits"))?)?;
            let Some(Value::Int(labels)) = it.next() else { return Err(ctx.err("labels must be integers")) };
            let axis = logits.shape().len() - 1;
            let classes = logits.shape()[axis];
            let lsm = B::log_softmax(logits, axis);
            let hot = one_hot_of(labels, classes, ctx);
            Ok(B::float_neg(super::staged_reduce::sum_dim(B::float_mul(lsm, hot), axis)))
        }
        Op::SoftmaxCrossEntropy(_) => {
            let [logits, labels] = ctx.floats(inputs)?;
            let axis = logits.shape().len() - 1;
            let lsm = B::log_softmax(logits, axis);
            Ok(B::float_neg(super::staged_reduce::sum_dim(B::float_mul(lsm, labels), axis)))
        }
        Op::SigmoidCrossEntropy(_) => {
            // max(x, 0) - x z + log(1 + exp(-|x|))
            let [x, z] = ctx.floats(inputs)?;
            let pos = B::relu(x.clone());
            let xz = B::float_mul(x.clone(), z);
            let soft = B::float_log(B::float_add_scalar(B::float_exp(B::float_neg(B::float_abs(x))), 1.0f64.into()));
            Ok(B::float_add(B::float_sub(pos, xz), soft))
        }
        _ => Err(ctx.err("not a loss")),
    }
}
