//! Element types a graph value can have.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a value flowing along an edge.
///
/// Deliberately small: `F32` for everything trainable, `I64` for labels, indices and the
/// global step (TensorFlow's choice), `Bool` for masks and comparisons. The runtime may
/// compute floats in another precision (f64 for gradient checks) without the graph knowing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    I64,
    Bool,
}

impl DType {
    /// Bytes per element, used by the memory and communication estimates.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        self == DType::F32
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        })
    }
}
