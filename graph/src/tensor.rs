//! Host-side tensors: the currency between the engine's layers.
//!
//! Constants in a graph, feeds and fetches of a step, checkpoint contents and input
//! batches are all plain row-major host arrays. Device tensors live only inside the
//! runtime; everything that crosses a crate boundary is a `HostTensor`.

use crate::{DType, GraphError, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum HostData {
    F32(Vec<f32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

impl HostData {
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::I64(v) => v.len(),
            HostData::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::I64(_) => DType::I64,
            HostData::Bool(_) => DType::Bool,
        }
    }
}

/// A dense row-major array with a concrete shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: HostData,
}

impl HostTensor {
    /// Checks that the data fills the shape exactly.
    pub fn new(shape: Vec<usize>, data: HostData) -> Result<Self> {
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(GraphError::TensorData { shape: shape.clone(), len: data.len() });
        }
        Ok(HostTensor { shape, data })
    }

    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> Result<Self> {
        Self::new(shape, HostData::F32(data))
    }

    pub fn i64(shape: Vec<usize>, data: Vec<i64>) -> Result<Self> {
        Self::new(shape, HostData::I64(data))
    }

    pub fn scalar_f32(v: f32) -> Self {
        HostTensor { shape: vec![], data: HostData::F32(vec![v]) }
    }

    pub fn scalar_i64(v: i64) -> Self {
        HostTensor { shape: vec![], data: HostData::I64(vec![v]) }
    }

    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Self {
        let n = shape.iter().product();
        let data = match dtype {
            DType::F32 => HostData::F32(vec![0.0; n]),
            DType::I64 => HostData::I64(vec![0; n]),
            DType::Bool => HostData::Bool(vec![false; n]),
        };
        HostTensor { shape, data }
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            HostData::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.data {
            HostData::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The single value of a one-element tensor, as f64 (for logs and metrics).
    pub fn scalar_value(&self) -> Option<f64> {
        if self.len() != 1 {
            return None;
        }
        Some(match &self.data {
            HostData::F32(v) => v[0] as f64,
            HostData::I64(v) => v[0] as f64,
            HostData::Bool(v) => v[0] as u8 as f64,
        })
    }

    /// Every element as f64, whatever the dtype (comparisons in tests and metrics).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
            HostData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }
}
