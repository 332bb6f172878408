//! Data movement: transpose, concatenation, slicing, padding, broadcasting.

use super::{KernelCtx, align, expand_float};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::ops::PadMode;
use burn::backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn::tensor::{Shape as BurnShape, Slice as BurnSlice};
use engine_graph::ops::{Concat, Pad, Slice, Transpose};

pub(super) fn transpose(t: &Transpose, v: Value) -> Value {
    match v {
        Value::Float(x) => Value::Float(B::float_permute(x, &t.perm)),
        Value::Int(x) => Value::Int(B::int_permute(x, &t.perm)),
        Value::Bool(x) => Value::Bool(B::bool_permute(x, &t.perm)),
        Value::Unit => Value::Unit,
    }
}

pub(super) fn concat(c: &Concat, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    match inputs.first() {
        Some(Value::Float(_)) => Ok(Value::Float(B::float_cat(ctx_floats(inputs, ctx)?, c.axis))),
        Some(Value::Int(_)) => {
            let v = inputs.into_iter().map(|x| match x {
                Value::Int(t) => Ok(t),
                _ => Err(ctx.err("mixed dtypes")),
            });
            Ok(Value::Int(B::int_cat(v.collect::<Result<Vec<_>>>()?, c.axis)))
        }
        _ => Err(ctx.err("only float and int tensors can be concatenated")),
    }
}

fn ctx_floats(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<T>> {
    inputs.into_iter().map(|v| ctx.float(v)).collect()
}

pub(super) fn slice(s: &Slice, v: Value, ctx: &KernelCtx<'_>) -> Result<Value> {
    let dims = v.shape();
    let ranges: Vec<BurnSlice> = s
        .begin
        .iter()
        .zip(&s.size)
        .zip(&dims)
        .map(|((&b, size), &d)| BurnSlice::new(b as isize, Some(size.map(|n| b + n).unwrap_or(d) as isize), 1))
        .collect();
    Ok(match v {
        Value::Float(x) => Value::Float(B::float_slice(x, &ranges)),
        Value::Int(x) => Value::Int(B::int_slice(x, &ranges)),
        Value::Bool(x) => Value::Bool(B::bool_slice(x, &ranges)),
        Value::Unit => return Err(ctx.err("cannot slice a unit value")),
    })
}

pub(super) fn pad(p: &Pad, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x] = ctx.floats(inputs)?;
    Ok(zero_pad(x, &p.pads))
}

pub(crate) fn zero_pad(x: T, pads: &[(usize, usize)]) -> T {
    pad_with(x, pads, 0.0)
}

pub(crate) fn pad_with(x: T, pads: &[(usize, usize)], value: f32) -> T {
    if pads.iter().all(|p| *p == (0, 0)) {
        return x;
    }
    B::float_pad(x, pads, PadMode::Constant(value))
}

pub(super) fn broadcast_to(v: Value, ctx: &KernelCtx<'_>) -> Result<Value> {
    let out = ctx.out_shape(0)?;
    Ok(match align(v, out.len()) {
        Value::Float(x) => Value::Float(expand_float(x, &out)),
        Value::Int(x) => Value::Int(B::int_expand(x, BurnShape::from(out))),
        Value::Bool(x) => Value::Bool(B::bool_expand(x, BurnShape::from(out))),
        Value::Unit => Value::Unit,
    })
}
