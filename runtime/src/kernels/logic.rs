//! Comparisons, casts, one-hot encoding and selection.

use super::{KernelCtx, align, expand_float};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::TensorMetadata;
use burn::backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn::tensor::{IntDType, Shape as BurnShape};
use engine_graph::{
    DType, Op,
    ops::{ArgMax, Cast, OneHot},
};

pub(super) fn argmax(a: &ArgMax, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    let [x] = ctx.floats(inputs)?;
    Ok(Value::Int(B::float_argmax(x, a.axis, IntDType::I64)))
}

pub(super) fn compare(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    let rank = inputs.iter().map(|v| v.shape().len()).max().unwrap_or(0);
    let out = ctx.out_shape(0)?;
    let mut it = inputs.into_iter().map(|v| align(v, rank));
    let (a, b) =
        (it.next().ok_or_else(|| ctx.err("missing input"))?, it.next().ok_or_else(|| ctx.err("missing input"))?);
    let bool_dtype = ctx.bool_dtype();
    Ok(Value::Bool(match (a, b) {
        (Value::Float(a), Value::Float(b)) => {
            let (a, b) = (expand_float(a, &out), expand_float(b, &out));
            match op {
                Op::Equal(_) => B::float_equal(a, b, bool_dtype),
                Op::Less(_) => B::float_lower(a, b, bool_dtype),
                _ => B::float_greater(a, b, bool_dtype),
            }
        }
        (Value::Int(a), Value::Int(b)) => {
            let shape = BurnShape::from(out);
            let (a, b) = (B::int_expand(a, shape.clone()), B::int_expand(b, shape));
            match op {
                Op::Equal(_) => B::int_equal(a, b, bool_dtype),
                Op::Less(_) => B::int_lower(a, b, bool_dtype),
                _ => B::int_greater(a, b, bool_dtype),
            }
        }
        (a, b) => return Err(ctx.err(format!("cannot compare {:?} with {:?}", a.dtype(), b.dtype()))),
    }))
}

pub(super) fn cast(c: &Cast, v: Value, ctx: &KernelCtx<'_>) -> Result<Value> {
    let float = ctx.precision.dtype();
    Ok(match (v, c.to) {
        (v @ Value::Float(_), DType::F32) | (v @ Value::Int(_), DType::I64) | (v @ Value::Bool(_), DType::Bool) => v,
        (Value::Float(t), DType::I64) => Value::Int(B::float_into_int(t, IntDType::I64)),
        (Value::Float(t), DType::Bool) => Value::Bool(B::float_not_equal_elem(t, 0.0f64.into(), ctx.bool_dtype())),
        (Value::Int(t), DType::F32) => Value::Float(B::int_into_float(t, float)),
        (Value::Int(t), DType::Bool) => Value::Bool(B::int_not_equal_elem(t, 0i64.into(), ctx.bool_dtype())),
        (Value::Bool(t), DType::F32) => Value::Float(B::bool_into_float(t, float)),
        (Value::Bool(t), DType::I64) => Value::Int(B::bool_into_int(t, IntDType::I64)),
        (Value::Unit, _) => return Err(ctx.err("cannot cast a unit value")),
    })
}

/// `[..] -> [.., depth]`: compares each index with `0..depth`, so an out-of-range index
/// gives a zero row instead of an out-of-bounds write.
pub(crate) fn one_hot_of(indices: T, depth: usize, ctx: &KernelCtx<'_>) -> T {
    let mut dims = indices.shape().to_vec();
    let mut col = dims.clone();
    col.push(1);
    let idx = B::int_reshape(indices, BurnShape::from(col));
    let mut range_dims = vec![1; dims.len()];
    range_dims.push(depth);
    let range = B::int_reshape(ctx.range(depth), BurnShape::from(range_dims));
    dims.push(depth);
    let shape = BurnShape::from(dims);
    let hit = B::int_equal(B::int_expand(idx, shape.clone()), B::int_expand(range, shape), ctx.bool_dtype());
    B::bool_into_float(hit, ctx.precision.dtype())
}

pub(super) fn one_hot(o: &OneHot, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    match inputs.into_iter().next() {
        Some(Value::Int(t)) => Ok(one_hot_of(t, o.depth, ctx)),
        _ => Err(ctx.err("one-hot needs integer indices")),
    }
}

pub(super) fn select(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let out = ctx.out_shape(0)?;
    let mut it = inputs.into_iter();
    let cond = match it.next().map(|c| align(c, out.len())) {
        Some(Value::Bool(c)) => B::bool_expand(c, BurnShape::from(out.clone())),
        _ => return Err(ctx.err("the condition must be boolean")),
    };
    let a = expand_float(ctx.float(it.next().ok_or_else(|| ctx.err("missing input"))?)?, &out);
    let b = expand_float(ctx.float(it.next().ok_or_else(|| ctx.err("missing input"))?)?, &out);
    Ok(B::float_mask_where(b, cond, a))
}
