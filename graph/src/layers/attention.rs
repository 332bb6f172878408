//! Keras' `MultiHeadAttention`, `AddPositionEmbedding` (the ViT's learned positions) and
//! `Embedding`, from primitives: projections (reshape + matrix product), per-head batched
//! products, a softmax over the keys; a gather for the embedding. The `fuse-attention`
//! pass turns the attention between the projections into one `FusedAttention`.

use crate::{DType, Dim, GraphBuilder, GraphError, Initializer, Outlet, Result, Shape, derive_seed};

/// `[batch, tokens, features]` with known tokens and features.
fn sequence(b: &GraphBuilder<'_>, layer: &str, x: Outlet) -> Result<[usize; 2]> {
    let shape = &b.fact(x)?.shape;
    match shape.dims() {
        [n, Dim::Known(t), Dim::Known(d)] if n.is_batch() => Ok([*t, *d]),
        _ => Err(GraphError::invalid(
            layer,
            format!("{layer} needs an input of shape [batch, tokens, features], got {shape}"),
        )),
    }
}

/// Keras' `MultiHeadAttention(num_heads, key_dim)`: variables `query`, `key`, `value`
/// (`kernel [features, heads, dim]`, `bias [heads, dim]`) and `attention_output` (`kernel
/// [heads, dim, output]`, `bias [output]`), named and shaped as Keras' so weights translate.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiHeadAttention {
    pub num_heads: usize,
    /// Size of each head for query and key.
    pub key_dim: usize,
    /// Size of each head for value; `None`: `key_dim`.
    pub value_dim: Option<usize>,
    /// Dropout on the attention weights, in training.
    pub dropout: f32,
    pub use_bias: bool,
    /// Output features; `None`: the query's.
    pub output_shape: Option<usize>,
    pub kernel_initializer: Initializer,
    pub bias_initializer: Initializer,
    /// The dropout's seed; `None`: derived from the job's seed and the layer's name.
    pub seed: Option<u64>,
}

impl MultiHeadAttention {
    /// Keras' defaults: Glorot-uniform kernels, zero biases, no dropout.
    pub fn new(num_heads: usize, key_dim: usize) -> Self {
        MultiHeadAttention {
            num_heads,
            key_dim,
            value_dim: None,
            dropout: 0.0,
            use_bias: true,
            output_shape: None,
            kernel_initializer: Initializer::GlorotUniform,
            bias_initializer: Initializer::Zeros,
            seed: None,
        }
    }

    pub fn value_dim(&self) -> usize {
        self.value_dim.unwrap_or(self.key_dim)
    }

    /// Self-attention when `value` and `key` are `None` (Keras: `key` defaults to `value`,
    /// `value` to the query).
    pub fn apply(
        &self,
        b: &mut GraphBuilder<'_>,
        query: Outlet,
        value: Option<Outlet>,
        key: Option<Outlet>,
        training: bool,
        job_seed: u64,
    ) -> Result<Outlet> {
        let name = b.unique_scope("multi_head_attention");
        let seed = derive_seed(self.seed.unwrap_or(job_seed), &name);
        b.with_scope(&name, |b| self.build(b, query, value, key, training.then_some(seed)))
    }

    /// The layer in the current scope; `dropout_seed` is `Some` in training.
    pub fn build(
        &self,
        b: &mut GraphBuilder<'_>,
        query: Outlet,
        value: Option<Outlet>,
        key: Option<Outlet>,
        dropout_seed: Option<u64>,
    ) -> Result<Outlet> {
        let value = value.unwrap_or(query);
        let key = key.unwrap_or(value);
        let [tq, dq] = sequence(b, "MultiHeadAttention's query", query)?;
        let [_, dv] = sequence(b, "MultiHeadAttention's value", value)?;
        let [tk, dk] = sequence(b, "MultiHeadAttention's key", key)?;
        let (h, kd, vd) = (self.num_heads, self.key_dim, self.value_dim());
        let out_dim = self.output_shape.unwrap_or(dq);
        let q = self.einsum_dense(b, "query", query, &[dq, h, kd], 1)?;
        let k = self.einsum_dense(b, "key", key, &[dk, h, kd], 1)?;
        let v = self.einsum_dense(b, "value", value, &[dv, h, vd], 1)?;
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
        if let Some(seed) = dropout_seed.filter(|_| self.dropout > 0.0) {
            weights = b.dropout(weights, self.dropout, seed)?;
        }
        let ctx = b.matmul(weights, v)?;
        // [N*H, T, D] -> [N, T, H*D].
        let ctx = b.reshape(ctx, Shape(vec![Dim::N, Dim::Known(h), Dim::Known(tq), Dim::Known(vd)]))?;
        let ctx = b.transpose(ctx, &[0, 2, 1, 3])?;
        let ctx = b.reshape(ctx, Shape(vec![Dim::N, Dim::Known(tq), Dim::Known(h * vd)]))?;
        self.einsum_dense(b, "attention_output", ctx, &[h, vd, out_dim], 2)
    }

    /// One projection, Keras' `EinsumDense`: a kernel kept in Keras' shape (`[features,
    /// heads, dim]` into the heads, `[heads, dim, output]` out of them), whose first
    /// `input_axes` axes are contracted with the (flattened) input's last axis; the bias has
    /// the shape of the rest (`[heads, dim]` or `[output]`).
    fn einsum_dense(
        &self,
        b: &mut GraphBuilder<'_>,
        scope: &str,
        x: Outlet,
        kernel_shape: &[usize; 3],
        input_axes: usize,
    ) -> Result<Outlet> {
        let (input, bias_shape) = kernel_shape.split_at(input_axes);
        let (rows, cols): (usize, usize) = (input.iter().product(), bias_shape.iter().product());
        b.with_scope(scope, |b| {
            let kernel = b.variable("kernel", kernel_shape, self.kernel_initializer.clone(), true)?;
            let w = b.reshape(kernel, Shape::known(&[rows, cols]))?;
            let y = b.project(x, w)?;
            if !self.use_bias {
                return Ok(y);
            }
            let bias = b.variable("bias", bias_shape, self.bias_initializer.clone(), true)?;
            let flat = b.reshape(bias, Shape::known(&[cols]))?;
            b.add(y, flat)
        })
    }
}

/// A learned position embedding added to `[batch, tokens, features]` (the ViT's): one
/// trainable `pos_embedding [tokens, features]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AddPositionEmbedding {
    pub initializer: Initializer,
}

impl AddPositionEmbedding {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("add_position_embedding");
        b.with_scope(&name, |b| self.build(b, x))
    }

    /// The layer in the current scope.
    pub fn build(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let [t, d] = sequence(b, "AddPositionEmbedding", x)?;
        let pos = b.variable("pos_embedding", &[t, d], self.initializer.clone(), true)?;
        b.add(x, pos)
    }
}

/// Keras' `Embedding(input_dim, output_dim)`: integer ids (`[batch, ...]`, numbers cast to
/// integers) to rows of a trainable `embeddings [input_dim, output_dim]`; the lookup's
/// kernel refuses an id outside the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    pub input_dim: usize,
    pub output_dim: usize,
    pub embeddings_initializer: Initializer,
}

impl Embedding {
    /// Keras' default initializer: uniform in [-0.05, 0.05].
    pub fn new(input_dim: usize, output_dim: usize) -> Self {
        Embedding {
            input_dim,
            output_dim,
            embeddings_initializer: Initializer::RandomUniform { min: -0.05, max: 0.05 },
        }
    }

    pub fn apply(&self, b: &mut GraphBuilder<'_>, ids: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("embedding");
        b.with_scope(&name, |b| self.build(b, ids))
    }

    /// The layer in the current scope.
    pub fn build(&self, b: &mut GraphBuilder<'_>, ids: Outlet) -> Result<Outlet> {
        let table =
            b.variable("embeddings", &[self.input_dim, self.output_dim], self.embeddings_initializer.clone(), true)?;
        let ids = if b.fact(ids)?.dtype == DType::I64 { ids } else { b.cast(ids, DType::I64)? };
        b.gather(table, ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::{Add, Concatenate, Dense, GlobalAveragePooling1D, LayerNormalization};
    use crate::{Graph, Shape};

    /// A transformer block from the Rust layers: Keras' names and shapes for the variables,
    /// Keras' output shapes.
    #[test]
    fn a_transformer_block_has_keras_names_and_shapes() -> Result<()> {
        let mut graph = Graph::new();
        let mut b = GraphBuilder::new(&mut graph);
        let ids = b.placeholder("tokens", DType::F32, Shape::batched(&[6]))?;
        let x = Embedding::new(20, 8).apply(&mut b, ids)?;
        let x = AddPositionEmbedding { initializer: Initializer::Zeros }.apply(&mut b, x)?;
        let normed = LayerNormalization::default().apply(&mut b, x)?;
        let attended = MultiHeadAttention::new(2, 4).apply(&mut b, normed, None, None, true, 7)?;
        let x = Add.apply(&mut b, &[x, attended])?;
        let both = Concatenate::default().apply(&mut b, &[x, normed])?;
        assert_eq!(b.fact(both)?.shape.to_string(), "[N, 6, 16]");
        let pooled = GlobalAveragePooling1D.apply(&mut b, both)?;
        let logits = Dense::new(3).apply(&mut b, pooled)?;
        assert_eq!(b.fact(logits)?.shape.to_string(), "[N, 3]");
        for (name, shape) in [
            ("embedding/embeddings", "[20, 8]"),
            ("add_position_embedding/pos_embedding", "[6, 8]"),
            ("multi_head_attention/query/kernel", "[8, 2, 4]"),
            ("multi_head_attention/query/bias", "[2, 4]"),
            ("multi_head_attention/attention_output/kernel", "[2, 4, 8]"),
            ("multi_head_attention/attention_output/bias", "[8]"),
        ] {
            let id = b.graph().find(name)?;
            assert_eq!(b.graph().fact(id.into())?.shape.to_string(), shape, "{name}");
        }
        assert!(Add.apply(&mut b, &[pooled, logits]).is_err(), "Add refuses inputs of two shapes");
        Ok(())
    }
}
