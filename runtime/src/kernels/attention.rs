//! Fused attention on any backend, from burn's primitives: the head split and merge as
//! reshapes around a swap of axes, batched products, burn's softmax, and the dropout's
//! mask from `dropout::mask_tensor` (the same units as the `Dropout` op drops). The CPU's
//! native kernel (`cpu/attention.rs`) keeps each head in cache instead.

use super::{KernelCtx, autocast::matmul, dims, dropout::mask_tensor};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::ops::{ActivationOps, FloatTensorOps};
use burn::tensor::Shape as BurnShape;
use engine_graph::{
    Fact, Shape,
    ops::{AttentionDims, Dropout, FusedAttention, FusedAttentionGrad},
};

/// `[N, T, H*D]` as `[N*H, T, D]`.
fn split(x: T, heads: usize) -> T {
    let [n, t, hd] = dims3(&x);
    let x = B::float_reshape(x, BurnShape::new([n, t, heads, hd / heads]));
    B::float_reshape(B::float_swap_dims(x, 1, 2), BurnShape::new([n * heads, t, hd / heads]))
}

/// `[N*H, T, D]` as `[N, T, H*D]`.
fn merge(x: T, heads: usize) -> T {
    let [nh, t, d] = dims3(&x);
    let x = B::float_reshape(x, BurnShape::new([nh / heads, heads, t, d]));
    B::float_reshape(B::float_swap_dims(x, 1, 2), BurnShape::new([nh / heads, t, heads * d]))
}

fn dims3(x: &T) -> [usize; 3] {
    match dims(x).as_slice() {
        &[a, b, c] => [a, b, c],
        _ => [0, 0, 0],
    }
}

fn transposed(x: T) -> T {
    B::float_swap_dims(x, 1, 2)
}

/// `(examples, sizes)` of concrete inputs, checked by the graph's own rule
/// ([`FusedAttention::dims`]) before any reshape can fail inside burn; the CPU kernel's
/// sizes come from here too.
pub(super) fn sizes(
    heads: usize,
    q: &[usize],
    k: &[usize],
    v: &[usize],
    ctx: &KernelCtx<'_>,
) -> Result<(usize, AttentionDims)> {
    let fact = |d: &[usize]| Fact::f32(Shape::known(d));
    let d = FusedAttention::dims(heads, &fact(q), &fact(k), &fact(v)).map_err(|e| ctx.err(e))?;
    // `dims` accepted q as [batch, tokens, features].
    Ok((q.first().copied().unwrap_or(0), d))
}

/// The weights after dropout, with the mask (`None` without dropout).
fn dropped(d: Option<&Dropout>, p: T, ctx: &KernelCtx<'_>) -> Result<(T, Option<T>)> {
    match d {
        Some(d) => {
            let mask = mask_tensor(d, &dims(&p), ctx)?;
            Ok((B::float_mul(p, mask.clone()), Some(mask)))
        }
        None => Ok((p, None)),
    }
}

pub(super) fn forward(op: &FusedAttention, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [q, k, v] = ctx.floats(inputs)?;
    sizes(op.heads, &dims(&q), &dims(&k), &dims(&v), ctx)?;
    let q = B::float_mul_scalar(split(q, op.heads), f64::from(op.scale).into());
    let scores = matmul(q, transposed(split(k, op.heads)), ctx);
    let p = B::softmax(scores, 2);
    let (w, _) = dropped(op.dropout.as_ref(), p.clone(), ctx)?;
    let out = merge(matmul(w, split(v, op.heads), ctx), op.heads);
    Ok(vec![Value::Float(out), Value::Float(p)])
}

pub(super) fn backward(op: &FusedAttentionGrad, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [dy, q, k, v, p] = ctx.floats(inputs)?;
    sizes(op.heads, &dims(&q), &dims(&k), &dims(&v), ctx)?;
    let h = op.heads;
    let scale = f64::from(op.scale);
    let (dy, q, k, v) = (split(dy, h), split(q, h), split(k, h), split(v, h));
    let (w, mask) = dropped(op.dropout.as_ref(), p.clone(), ctx)?;
    let dv = matmul(transposed(w), dy.clone(), ctx);
    let mut dp = matmul(dy, transposed(v), ctx);
    if let Some(m) = mask {
        dp = B::float_mul(dp, m);
    }
    let dot = super::staged_reduce::sum_dim(B::float_mul(dp.clone(), p.clone()), 2);
    let ds = B::float_mul(p, B::float_sub(dp, dot));
    let dq = B::float_mul_scalar(matmul(ds.clone(), k, ctx), scale.into());
    let dk = matmul(transposed(ds), B::float_mul_scalar(q, scale.into()), ctx);
    Ok([dq, dk, dv].into_iter().map(|t| Value::Float(merge(t, h))).collect())
}
