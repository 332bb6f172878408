//! What the compiler knows about a value: its element type and shape.

use crate::{DType, Shape};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fact {
    pub dtype: DType,
    pub shape: Shape,
}

impl Fact {
    pub fn new(dtype: DType, shape: Shape) -> Self {
        Fact { dtype, shape }
    }

    pub fn f32(shape: Shape) -> Self {
        Fact::new(DType::F32, shape)
    }

    pub fn scalar(dtype: DType) -> Self {
        Fact::new(dtype, Shape::scalar())
    }

    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Bytes for a given batch size (the memory and communication estimates use it).
    pub fn bytes(&self, batch: usize) -> usize {
        self.shape.num_elements(batch) * self.dtype.size_bytes()
    }
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
