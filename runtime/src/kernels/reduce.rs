//! Reductions; burn keeps reduced axes as size 1 and the executor reshapes to the fact.

use super::{KernelCtx, staged_reduce};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::ops::IntTensorOps;
use engine_graph::{Op, ops::Size};

pub(super) fn run(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    let x = inputs.into_iter().next().ok_or_else(|| ctx.err("missing input"))?;
    let axes = match op {
        Op::ReduceSum(r) => &r.axes,
        Op::ReduceMean(r) => &r.axes,
        Op::ReduceMax(r) => &r.axes,
        _ => return Err(ctx.err("not a reduction")),
    };
    match x {
        Value::Float(mut t) => {
            for &a in axes {
                t = match op {
                    Op::ReduceSum(_) => staged_reduce::sum_dim(t, a),
                    Op::ReduceMean(_) => staged_reduce::mean_dim(t, a),
                    _ => staged_reduce::max_dim(t, a),
                };
            }
            Ok(Value::Float(t))
        }
        Value::Int(mut t) if matches!(op, Op::ReduceSum(_)) => {
            for &a in axes {
                t = B::int_sum_dim(t, a);
            }
            Ok(Value::Int(t))
        }
        other => Err(ctx.err(format!("cannot reduce a {:?} value", other.dtype()))),
    }
}

/// The element count over `axes` of the input's concrete shape.
pub(super) fn size(s: &Size, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let dims = inputs.first().ok_or_else(|| ctx.err("missing input"))?.shape();
    let n: usize = if s.axes.is_empty() {
        dims.iter().product()
    } else {
        s.axes.iter().map(|&a| dims.get(a).copied().unwrap_or(1)).product()
    };
    Ok(ctx.scalar(n as f64))
}
