//! Layers, with Keras' parameters and defaults (glorot_uniform kernels, zero biases,
//! VALID padding, pool strides equal to the pool size).

use super::{AddPositionEmbedding, BatchNormalization, Embedding, LayerNormalization, MultiHeadAttention};
use engine_graph::{Initializer, ops::Padding};
use serde::{
    Deserialize, Deserializer,
    de::{self, SeqAccess, Visitor},
};
use std::fmt;
use std::ops::RangeInclusive;

/// One layer of a `Sequential` model or one node of a `Functional` one. The merge layers
/// (`Add`, `Multiply`, `Concatenate`) take several inputs, so only a functional model can
/// use them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub enum Layer {
    Dense(Dense),
    #[serde(rename = "Conv2D", alias = "Conv2d")]
    Conv2d(Conv2d),
    #[serde(rename = "MaxPooling2D", alias = "MaxPool2d")]
    MaxPool2d(Pool2d),
    #[serde(rename = "AveragePooling2D", alias = "AvgPool2d")]
    AvgPool2d(Pool2d),
    Flatten,
    Reshape(Reshape),
    Dropout(Dropout),
    Activation(Activation),
    Add,
    Multiply,
    Concatenate(Concatenate),
    BatchNormalization(BatchNormalization),
    LayerNormalization(LayerNormalization),
    /// `[batch, height, width, channels]` to `[batch, channels]`: the mean over space.
    GlobalAveragePooling2D,
    /// `[batch, steps, features]` to `[batch, features]`: the mean over steps (tokens).
    GlobalAveragePooling1D,
    ZeroPadding2D(ZeroPadding2D),
    MultiHeadAttention(MultiHeadAttention),
    AddPositionEmbedding(AddPositionEmbedding),
    Embedding(Embedding),
}

/// Most inputs a merge layer takes (each is a value held at once).
pub const MAX_MERGE_INPUTS: usize = 64;

impl Layer {
    /// Keras' default layer name, the base of variable scopes (`dense`, `dense_1`, ...).
    pub fn keras_name(&self) -> &'static str {
        match self {
            Layer::Dense(_) => "dense",
            Layer::Conv2d(_) => "conv2d",
            Layer::MaxPool2d(_) => "max_pooling2d",
            Layer::AvgPool2d(_) => "average_pooling2d",
            Layer::Flatten => "flatten",
            Layer::Reshape(_) => "reshape",
            Layer::Dropout(_) => "dropout",
            Layer::Activation(_) => "activation",
            Layer::Add => "add",
            Layer::Multiply => "multiply",
            Layer::Concatenate(_) => "concatenate",
            Layer::BatchNormalization(_) => "batch_normalization",
            Layer::LayerNormalization(_) => "layer_normalization",
            Layer::GlobalAveragePooling2D => "global_average_pooling2d",
            Layer::GlobalAveragePooling1D => "global_average_pooling1d",
            Layer::ZeroPadding2D(_) => "zero_padding2d",
            Layer::MultiHeadAttention(_) => "multi_head_attention",
            Layer::AddPositionEmbedding(_) => "add_position_embedding",
            Layer::Embedding(_) => "embedding",
        }
    }

    /// The name as written in a spec (`Conv2d`).
    pub fn spec_name(&self) -> &'static str {
        match self {
            Layer::Dense(_) => "Dense",
            Layer::Conv2d(_) => "Conv2D",
            Layer::MaxPool2d(_) => "MaxPooling2D",
            Layer::AvgPool2d(_) => "AveragePooling2D",
            Layer::Flatten => "Flatten",
            Layer::Reshape(_) => "Reshape",
            Layer::Dropout(_) => "Dropout",
            Layer::Activation(_) => "Activation",
            Layer::Add => "Add",
            Layer::Multiply => "Multiply",
            Layer::Concatenate(_) => "Concatenate",
            Layer::BatchNormalization(_) => "BatchNormalization",
            Layer::LayerNormalization(_) => "LayerNormalization",
            Layer::GlobalAveragePooling2D => "GlobalAveragePooling2D",
            Layer::GlobalAveragePooling1D => "GlobalAveragePooling1D",
            Layer::ZeroPadding2D(_) => "ZeroPadding2D",
            Layer::MultiHeadAttention(_) => "MultiHeadAttention",
            Layer::AddPositionEmbedding(_) => "AddPositionEmbedding",
            Layer::Embedding(_) => "Embedding",
        }
    }

    /// How many inputs the layer takes: merges two or more, attention its query and
    /// optionally value and key, the rest one.
    pub fn inputs(&self) -> RangeInclusive<usize> {
        match self {
            Layer::Add | Layer::Multiply | Layer::Concatenate(_) => 2..=MAX_MERGE_INPUTS,
            Layer::MultiHeadAttention(_) => 1..=3,
            _ => 1..=1,
        }
    }
}

/// The layers' activations: the Rust layers' own (`engine_graph::layers`), so both build
/// the same nodes.
pub use engine_graph::layers::Activation;

/// A penalty added to the loss (Keras' `kernel_regularizer`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub enum Regularizer {
    /// `factor * sum(w^2)`, Keras' `L2(l2=factor)` (note: not TensorFlow's `l2_loss`, which halves it).
    L2(f32),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dense {
    pub units: usize,
    #[serde(default)]
    pub activation: Activation,
    #[serde(default = "yes")]
    pub use_bias: bool,
    #[serde(default = "glorot_uniform")]
    pub kernel_initializer: Initializer,
    #[serde(default)]
    pub bias_initializer: Initializer,
    #[serde(default)]
    pub kernel_regularizer: Option<Regularizer>,
    #[serde(default)]
    pub bias_regularizer: Option<Regularizer>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv2d {
    pub filters: usize,
    pub kernel_size: Size2,
    #[serde(default = "ones")]
    pub strides: Size2,
    #[serde(default)]
    pub padding: Padding,
    /// Taps this many pixels apart (atrous convolution); strides must then be 1, as in Keras.
    #[serde(default = "ones")]
    pub dilation_rate: Size2,
    /// Independent convolutions over channel groups; `groups` = input channels with
    /// `filters` a multiple of it is a depthwise convolution.
    #[serde(default = "one")]
    pub groups: usize,
    #[serde(default)]
    pub activation: Activation,
    #[serde(default = "yes")]
    pub use_bias: bool,
    #[serde(default = "glorot_uniform")]
    pub kernel_initializer: Initializer,
    #[serde(default)]
    pub bias_initializer: Initializer,
    #[serde(default)]
    pub kernel_regularizer: Option<Regularizer>,
    #[serde(default)]
    pub bias_regularizer: Option<Regularizer>,
}

/// `MaxPool2d` and `AvgPool2d`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool2d {
    #[serde(default = "twos")]
    pub pool_size: Size2,
    /// `None`: the pool size, as Keras does.
    #[serde(default)]
    pub strides: Option<Size2>,
    #[serde(default)]
    pub padding: Padding,
}

impl Pool2d {
    pub fn strides(&self) -> Size2 {
        self.strides.unwrap_or(self.pool_size)
    }
}

/// Keras' `Reshape`: the batch dimension is implied; one entry may be -1.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reshape {
    pub target_shape: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dropout {
    pub rate: f32,
    /// `None`: derived from the job's random seed and the layer's name.
    #[serde(default)]
    pub seed: Option<u64>,
}

/// Keras' `ZeroPadding2D`: `padding` rows above and below, columns left and right.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZeroPadding2D {
    #[serde(default = "ones")]
    pub padding: Size2,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concatenate {
    /// Counted over the full shape including the batch axis, as Keras does; -1 is the last.
    #[serde(default = "last_axis")]
    pub axis: i64,
}

/// A 2-D size written as one integer (`3`) or a pair (`(3, 5)` or `[3, 5]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size2(pub [usize; 2]);

impl<'de> Deserialize<'de> for Size2 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Size2Visitor)
    }
}

struct Size2Visitor;

impl<'de> Visitor<'de> for Size2Visitor {
    type Value = Size2;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer or a pair `(height, width)`")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size2, E> {
        let n = usize::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))?;
        Ok(Size2([n, n]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Size2, A::Error> {
        let h = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let w = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
        Ok(Size2([h, w]))
    }
}

fn yes() -> bool {
    true
}

fn glorot_uniform() -> Initializer {
    Initializer::GlorotUniform
}

fn one() -> usize {
    1
}

fn ones() -> Size2 {
    Size2([1, 1])
}

fn twos() -> Size2 {
    Size2([2, 2])
}

fn last_axis() -> i64 {
    -1
}
