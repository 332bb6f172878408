//! What to take from each `tf.Example` of a TFRecord source, like TensorFlow's
//! `tf.io.FixedLenFeature`: a name, the list kind, a fixed shape, and what to do with bytes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `tf.train.Feature` list a feature is stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FeatureKind {
    /// `float_list`, read as f32.
    Float,
    /// `int64_list`, read as i64.
    Int64,
    /// `bytes_list`: with a vocabulary, each value becomes its index (i64); without, the
    /// single value's bytes are the elements (u8 pixels read as f32, like `tf.io.decode_raw`).
    Bytes,
}

/// One feature to read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureDef {
    pub kind: FeatureKind,
    /// Per-example shape; the record must hold exactly this many values. Scalar when empty.
    #[serde(default)]
    pub shape: Vec<usize>,
    /// The value of every element when a record lacks the feature; without it a missing
    /// feature is an error.
    #[serde(default)]
    pub default_value: Option<f64>,
    /// For `Bytes`: the strings to index.
    #[serde(default)]
    pub vocabulary: Option<Vec<String>>,
}

impl FeatureDef {
    pub fn new(kind: FeatureKind, shape: Vec<usize>) -> Self {
        FeatureDef { kind, shape, default_value: None, vocabulary: None }
    }

    pub fn float(shape: Vec<usize>) -> Self {
        Self::new(FeatureKind::Float, shape)
    }

    pub fn int64(shape: Vec<usize>) -> Self {
        Self::new(FeatureKind::Int64, shape)
    }

    /// Raw bytes, read as u8 elements into f32.
    pub fn raw_bytes(shape: Vec<usize>) -> Self {
        Self::new(FeatureKind::Bytes, shape)
    }

    pub fn with_default(mut self, value: f64) -> Self {
        self.default_value = Some(value);
        self
    }

    pub fn with_vocabulary<S: Into<String>>(mut self, vocabulary: impl IntoIterator<Item = S>) -> Self {
        self.vocabulary = Some(vocabulary.into_iter().map(Into::into).collect());
        self
    }
}

/// The features of a TFRecord source, and which one is the label.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FeatureSpec {
    pub features: BTreeMap<String, FeatureDef>,
    #[serde(default)]
    pub label: Option<String>,
}

impl FeatureSpec {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feature(mut self, name: impl Into<String>, def: FeatureDef) -> Self {
        self.features.insert(name.into(), def);
        self
    }

    pub fn label(mut self, name: impl Into<String>) -> Self {
        self.label = Some(name.into());
        self
    }
}
