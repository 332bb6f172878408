//! Activations, with softmax and log-softmax computed stably by burn.

use super::KernelCtx;
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::ops::{ActivationOps, FloatTensorOps};
use engine_graph::Op;

pub(super) fn run(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    if let Op::ReluGrad(_) = op {
        let [y, gy] = ctx.floats(inputs)?;
        return Ok(B::relu_backward(y, gy));
    }
    let [x] = ctx.floats(inputs)?;
    Ok(match op {
        Op::Relu(_) => B::relu(x),
        Op::Sigmoid(_) => B::sigmoid(x),
        Op::Tanh(_) => B::float_tanh(x),
        Op::Softmax(s) => B::softmax(x, s.axis),
        Op::LogSoftmax(s) => B::log_softmax(x, s.axis),
        _ => return Err(ctx.err("not an activation")),
    })
}
