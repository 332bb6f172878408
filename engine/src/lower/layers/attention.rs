//! `MultiHeadAttention`, `AddPositionEmbedding` and `Embedding`, from primitives: projections
//! (reshape + matrix product), per-head batched products, a softmax over the keys.

use super::super::{LowerError, Mode, build::Lowering};
use crate::spec::{AddPositionEmbedding, Embedding, FieldPath, MultiHeadAttention};
use engine_graph::{DType, Dim, GraphBuilder, Outlet, Result, Shape, derive_seed};

/// `[batch, tokens, features]` with known tokens and features.
fn sequence(cx: &Lowering<'_, '_, '_>, layer: &str, x: Outlet, path: &FieldPath) -> Result<[usize; 2], LowerError> {
    let shape = cx.shape_of(x)?;
    match shape.dims() {
        [n, Dim::Known(t), Dim::Known(d)] if n.is_batch() => Ok([*t, *d]),
        _ => {
            Err(cx.shape_error(path, format!("{layer} needs an input of shape [batch, tokens, features], got {shape}")))
        }
    }
}

/// Keras' `MultiHeadAttention`: variables `query`, `key`, `value` (`kernel [features,
/// heads, dim]`, `bias [heads, dim]`) and `attention_output` (`kernel [heads, dim,
/// output]`, `bias [output]`), named and shaped as Keras' so weights translate.
pub fn multi_head_attention(
    cx: &mut Lowering<'_, '_, '_>,
    m: &MultiHeadAttention,
    name: &str,
    inputs: &[Outlet],
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let query = inputs[0];
    let value = inputs.get(1).copied().unwrap_or(query);
    let key = inputs.get(2).copied().unwrap_or(value);
    let [tq, dq] = sequence(cx, "MultiHeadAttention's query", query, path)?;
    let [tv, dv] = sequence(cx, "MultiHeadAttention's value", value, path)?;
    let [tk, dk] = sequence(cx, "MultiHeadAttention's key", key, path)?;
    if tk != tv {
        return Err(cx.shape_error(path, format!("key and value must have as many tokens, found {tk} and {tv}")));
    }
    let (h, kd, vd) = (m.num_heads, m.key_dim, m.value_dim());
    let out_dim = m.output_shape.unwrap_or(dq);
    for (what, dims) in
        [("query kernel", [dq, h, kd]), ("value kernel", [dv, h, vd]), ("output kernel", [h, vd, out_dim])]
    {
        cx.check_variable(path, what, &dims)?;
    }
    cx.check_flops(path, &[h as u64, tq as u64, tk as u64, kd.max(vd) as u64, 4])?;
    let dropout =
        (cx.mode == Mode::Train && m.dropout > 0.0).then(|| (m.dropout, derive_seed(m.seed.unwrap_or(cx.seed), name)));
    cx.b.with_scope(name, |b| {
        let q = einsum_dense(b, m, "query", query, &[dq, h, kd], 1)?;
        let k = einsum_dense(b, m, "key", key, &[dk, h, kd], 1)?;
        let v = einsum_dense(b, m, "value", value, &[dv, h, vd], 1)?;
        // [N, T, H*D] -> [N*H, T, D]: one batch of per-head matrices.
        let heads = |b: &mut GraphBuilder<'_>, x: Outlet, t: usize, d: usize| -> Result<Outlet> {
            let x = b.reshape(x, Shape(vec![Dim::N, Dim::Known(t), Dim::Known(h), Dim::Known(d)]))?;
            let x = b.transpose(x, &[0, 2, 1, 3])?;
            b.reshape(x, Shape(vec![Dim::Batch(h), Dim::Known(t), Dim::Known(d)]))
        };
        let q = heads(b, q, tq, kd)?;
        let k = heads(b, k, tk, kd)?;
        let v = heads(b, v, tk, vd)?;
        let scale = b.scalar(1.0 / (kd as f32).sqrt())?;
        let q = b.mul(q, scale)?;
        let scores = b.matmul_t(q, k, false, true)?;
        let mut weights = b.softmax(scores, -1)?;
        if let Some((rate, seed)) = dropout {
            weights = b.dropout(weights, rate, seed)?;
        }
        let ctx = b.matmul(weights, v)?;
        // [N*H, T, D] -> [N, T, H*D].
        let ctx = b.reshape(ctx, Shape(vec![Dim::N, Dim::Known(h), Dim::Known(tq), Dim::Known(vd)]))?;
        let ctx = b.transpose(ctx, &[0, 2, 1, 3])?;
        let ctx = b.reshape(ctx, Shape(vec![Dim::N, Dim::Known(tq), Dim::Known(h * vd)]))?;
        einsum_dense(b, m, "attention_output", ctx, &[h, vd, out_dim], 2)
    })
    .map_err(|e| cx.graph_error(path, e))
}

/// One of attention's projections, Keras' `EinsumDense`: a kernel kept in Keras' shape
/// (`[features, heads, dim]` into the heads, `[heads, dim, output]` out of them), whose
/// first `input_axes` axes are contracted with the (flattened) input's last axis; the bias
/// has the shape of the rest (`[heads, dim]` or `[output]`).
fn einsum_dense(
    b: &mut GraphBuilder<'_>,
    m: &MultiHeadAttention,
    scope: &str,
    x: Outlet,
    kernel_shape: &[usize; 3],
    input_axes: usize,
) -> Result<Outlet> {
    let (input, bias_shape) = kernel_shape.split_at(input_axes);
    let (rows, cols): (usize, usize) = (input.iter().product(), bias_shape.iter().product());
    b.with_scope(scope, |b| {
        let kernel = b.variable("kernel", kernel_shape, m.kernel_initializer.clone(), true)?;
        let w = b.reshape(kernel, Shape::known(&[rows, cols]))?;
        let y = b.project(x, w)?;
        if !m.use_bias {
            return Ok(y);
        }
        let bias = b.variable("bias", bias_shape, m.bias_initializer.clone(), true)?;
        let flat = b.reshape(bias, Shape::known(&[cols]))?;
        b.add(y, flat)
    })
}

pub fn add_position_embedding(
    cx: &mut Lowering<'_, '_, '_>,
    p: &AddPositionEmbedding,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let [t, d] = sequence(cx, "AddPositionEmbedding", x, path)?;
    cx.check_variable(path, "position embedding", &[t, d])?;
    cx.b.with_scope(name, |b| {
        let pos = b.variable("pos_embedding", &[t, d], p.initializer.clone(), true)?;
        b.add(x, pos)
    })
    .map_err(|e| cx.graph_error(path, e))
}

/// Ids arrive as numbers (model inputs are floats) and are cast to integers; the lookup's
/// kernel refuses an id outside the table.
pub fn embedding(
    cx: &mut Lowering<'_, '_, '_>,
    e: &Embedding,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let shape = cx.shape_of(x)?;
    if !shape.dims().first().is_some_and(|d| d.is_batch()) {
        return Err(cx.shape_error(path, format!("Embedding needs an input of shape [batch, ...] of ids, got {shape}")));
    }
    cx.check_variable(path, "embeddings", &[e.input_dim, e.output_dim])?;
    cx.b.with_scope(name, |b| {
        let table = b.variable("embeddings", &[e.input_dim, e.output_dim], e.embeddings_initializer.clone(), true)?;
        let ids = if b.fact(x)?.dtype == DType::I64 { x } else { b.cast(x, DType::I64)? };
        b.gather(table, ids)
    })
    .map_err(|e| cx.graph_error(path, e))
}
