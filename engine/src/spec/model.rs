//! The model section: a chain of layers, or a graph of named layers.

use super::layer::Layer;
use serde::{
    Deserialize, Deserializer,
    de::{MapAccess, Visitor},
};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub enum Model {
    Sequential(Sequential),
    Functional(Functional),
}

/// Keras' `Sequential`: each layer consumes the previous one's output.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sequential {
    /// One example's shape, without the batch dimension (NHWC images: `[28, 28, 1]`).
    pub input_shape: Vec<usize>,
    pub layers: Vec<Layer>,
}

/// Keras' functional API: named inputs, named nodes each applying a layer to earlier
/// nodes or inputs, and the node that is the model's output (its logits).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Functional {
    /// Input name to one example's shape, in the order written.
    #[serde(deserialize_with = "ordered_map")]
    pub inputs: Vec<(String, Vec<usize>)>,
    pub nodes: Vec<FunctionalNode>,
    pub outputs: Vec<String>,
}

/// `("name", Layer, ["input", ...])`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FunctionalNode(pub String, pub Layer, pub Vec<String>);

impl FunctionalNode {
    pub fn name(&self) -> &str {
        &self.0
    }

    pub fn layer(&self) -> &Layer {
        &self.1
    }

    pub fn inputs(&self) -> &[String] {
        &self.2
    }
}

/// A `{"key": value}` map read in the order written (a `BTreeMap` would sort it).
fn ordered_map<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, Vec<usize>)>, D::Error> {
    struct Ordered;
    impl<'de> Visitor<'de> for Ordered {
        type Value = Vec<(String, Vec<usize>)>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of input names to shapes, like `{\"image\": [28, 28, 1]}`")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = map.next_entry()? {
                out.push(entry);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Ordered)
}
