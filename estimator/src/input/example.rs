//! What a pipeline hands out (`Batch`) and the user-facing views of one example.

use super::schema::{Row, Schema};
use engine_graph::{HostData, HostTensor};
use std::collections::BTreeMap;

/// One example with its features by name, as a user sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub features: BTreeMap<String, HostTensor>,
    pub label: Option<HostTensor>,
}

/// A borrowed view of one example inside the pipeline, given to filter predicates so that
/// filtering costs no copy.
#[derive(Debug, Clone, Copy)]
pub struct ExampleRef<'a> {
    pub(crate) schema: &'a Schema,
    pub(crate) row: &'a Row,
    pub(crate) id: u64,
}

/// A borrowed tensor: a shape and the values.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    pub shape: &'a [usize],
    pub data: &'a HostData,
}

impl<'a> TensorRef<'a> {
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self.data {
            HostData::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<&'a [i64]> {
        match self.data {
            HostData::I64(v) => Some(v),
            _ => None,
        }
    }
}

impl<'a> ExampleRef<'a> {
    /// The example's index in its source (stable across sharding and shuffling).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn feature(&self, name: &str) -> Option<TensorRef<'a>> {
        let index = self.schema.features.iter().position(|f| f.name == name)?;
        self.column(index)
    }

    pub fn label(&self) -> Option<TensorRef<'a>> {
        self.column(self.schema.label_index()?)
    }

    fn column(&self, index: usize) -> Option<TensorRef<'a>> {
        let info = self.schema.column(index)?;
        Some(TensorRef { shape: &info.shape, data: self.row.values.get(index)? })
    }

    /// An owned copy (allocates; for tests and debugging).
    pub fn to_example(&self) -> Example {
        let mut features = BTreeMap::new();
        let mut label = None;
        for (index, info) in self.schema.columns().enumerate() {
            if let Some(data) = self.row.values.get(index) {
                let tensor = HostTensor { shape: info.shape.clone(), data: data.clone() };
                if Some(index) == self.schema.label_index() {
                    label = Some(tensor);
                } else {
                    features.insert(info.name.clone(), tensor);
                }
            }
        }
        Example { features, label }
    }
}

/// A batch of examples: every tensor's first dimension is `len`.
///
/// In evaluation mode with padding (see the module docs), the last batches of a shard are
/// filled up with zero rows, and the `mask` feature (f32, 1 for a real example, 0 for
/// padding) says which rows count; `ids` lists only the real examples.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub features: BTreeMap<String, HostTensor>,
    pub labels: Option<HostTensor>,
    /// Rows in every tensor, padding included.
    pub len: usize,
    /// Each real example's index in its source, in row order.
    pub ids: Vec<u64>,
}

impl Batch {
    /// Row `index` as an `Example` (allocates; for tests and debugging). None past the end.
    pub fn example(&self, index: usize) -> Option<Example> {
        if index >= self.len {
            return None;
        }
        let features: Option<BTreeMap<String, HostTensor>> =
            self.features.iter().map(|(name, t)| Some((name.clone(), row_of(t, index)?))).collect();
        let label = match &self.labels {
            Some(t) => Some(row_of(t, index)?),
            None => None,
        };
        Some(Example { features: features?, label })
    }
}

fn row_of(tensor: &HostTensor, index: usize) -> Option<HostTensor> {
    let shape: Vec<usize> = tensor.shape.get(1..)?.to_vec();
    let size: usize = shape.iter().product();
    let range = index * size..(index + 1) * size;
    let data = match &tensor.data {
        HostData::F32(v) => HostData::F32(v.get(range)?.to_vec()),
        HostData::I64(v) => HostData::I64(v.get(range)?.to_vec()),
        HostData::Bool(v) => HostData::Bool(v.get(range)?.to_vec()),
    };
    Some(HostTensor { shape, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_splits_a_row() {
        let mut features = BTreeMap::new();
        features.insert("x".to_string(), HostTensor::f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap());
        let batch =
            Batch { features, labels: Some(HostTensor::i64(vec![2], vec![7, 8]).unwrap()), len: 2, ids: vec![0, 1] };
        let second = batch.example(1).unwrap();
        assert_eq!(second.features["x"], HostTensor::f32(vec![2], vec![3.0, 4.0]).unwrap());
        assert_eq!(second.label, Some(HostTensor::i64(vec![], vec![8]).unwrap()));
        assert!(batch.example(2).is_none());
    }
}
