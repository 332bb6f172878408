//! Attention and sequence layers, with Keras' arguments and defaults.

use engine_graph::Initializer;
use serde::Deserialize;

/// Keras' `MultiHeadAttention`. In a functional model its inputs are `[query]`
/// (self-attention), `[query, value]` or `[query, value, key]`, each `[batch, tokens,
/// features]`; in a `Sequential` it attends over its input. The output has the query's
/// shape (or `output_shape` features).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiHeadAttention {
    pub num_heads: usize,
    /// Size of each head for query and key.
    pub key_dim: usize,
    /// Size of each head for value; `None`: `key_dim`.
    #[serde(default)]
    pub value_dim: Option<usize>,
    /// Dropout on the attention weights, in training.
    #[serde(default)]
    pub dropout: f32,
    #[serde(default = "yes")]
    pub use_bias: bool,
    /// Output features; `None`: the query's.
    #[serde(default)]
    pub output_shape: Option<usize>,
    #[serde(default = "glorot_uniform")]
    pub kernel_initializer: Initializer,
    #[serde(default)]
    pub bias_initializer: Initializer,
    /// `None`: derived from the job's random seed and the layer's name.
    #[serde(default)]
    pub seed: Option<u64>,
}

impl MultiHeadAttention {
    pub fn value_dim(&self) -> usize {
        self.value_dim.unwrap_or(self.key_dim)
    }
}

/// Keras' `Embedding`: integer ids (given as numbers, `[batch, ...]`) to rows of a
/// trainable `[input_dim, output_dim]` table, `embeddings`. An id outside
/// `0..input_dim` fails the step, naming the layer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Embedding {
    pub input_dim: usize,
    pub output_dim: usize,
    #[serde(default = "embeddings_initializer")]
    pub embeddings_initializer: Initializer,
}

/// Keras': uniform in `[-0.05, 0.05]`.
fn embeddings_initializer() -> Initializer {
    Initializer::RandomUniform { min: -0.05, max: 0.05 }
}

/// A learned position embedding added to `[batch, tokens, features]` (the original
/// Vision Transformer's `AddPositionEmbs`): one trainable `[tokens, features]` variable,
/// `pos_embedding`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddPositionEmbedding {
    #[serde(default = "position_initializer")]
    pub initializer: Initializer,
}

fn yes() -> bool {
    true
}

fn glorot_uniform() -> Initializer {
    Initializer::GlorotUniform
}

/// ViT's: normal with standard deviation 0.02.
fn position_initializer() -> Initializer {
    Initializer::RandomNormal { mean: 0.0, stddev: 0.02 }
}
