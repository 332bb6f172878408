//! `MultiHeadAttention`, `AddPositionEmbedding` and `Embedding`: the spec's checks (shapes,
//! sizes) around the graph's Keras-named layers, which the Rust API builds too.

use super::super::{LowerError, Mode, build::Lowering};
use crate::spec::{AddPositionEmbedding, Embedding, FieldPath, MultiHeadAttention};
use engine_graph::{Dim, Outlet, derive_seed, layers};

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
    let [tk, _] = sequence(cx, "MultiHeadAttention's key", key, path)?;
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
    let layer = layers::MultiHeadAttention {
        num_heads: m.num_heads,
        key_dim: m.key_dim,
        value_dim: m.value_dim,
        dropout: m.dropout,
        use_bias: m.use_bias,
        output_shape: m.output_shape,
        kernel_initializer: m.kernel_initializer.clone(),
        bias_initializer: m.bias_initializer.clone(),
        seed: m.seed,
    };
    let dropout_seed = (cx.mode == Mode::Train).then(|| derive_seed(m.seed.unwrap_or(cx.seed), name));
    cx.b.with_scope(name, |b| layer.build(b, query, Some(value), Some(key), dropout_seed))
        .map_err(|e| cx.graph_error(path, e))
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
    let layer = layers::AddPositionEmbedding { initializer: p.initializer.clone() };
    cx.b.with_scope(name, |b| layer.build(b, x)).map_err(|e| cx.graph_error(path, e))
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
    let layer = layers::Embedding {
        input_dim: e.input_dim,
        output_dim: e.output_dim,
        embeddings_initializer: e.embeddings_initializer.clone(),
    };
    cx.b.with_scope(name, |b| layer.build(b, x)).map_err(|e| cx.graph_error(path, e))
}
