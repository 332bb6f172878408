//! In-memory tensors from Rust: the first dimension of each tensor indexes the examples.

use super::{FileSpan, Source};
use crate::input::error::{InputError, Result};
use crate::input::schema::{FeatureInfo, Row, Schema, mismatch};
use engine_graph::{HostData, HostTensor};
use std::collections::BTreeMap;

#[derive(Debug)]
pub(crate) struct TensorSource {
    schema: Schema,
    /// Columns in schema order.
    columns: Vec<HostTensor>,
    len: u64,
}

impl TensorSource {
    pub fn new(features: BTreeMap<String, HostTensor>, labels: Option<HostTensor>) -> Result<Self> {
        let mut len = None;
        let mut infos = Vec::new();
        let mut columns = Vec::new();
        let named =
            features.into_iter().map(|(n, t)| (n, t, false)).chain(labels.map(|t| ("label".to_string(), t, true)));
        let mut label = None;
        for (name, tensor, is_label) in named {
            let Some((&n, shape)) = tensor.shape.split_first() else {
                return Err(InputError::invalid(format!(
                    "`{name}` is a scalar; its first dimension must index examples"
                )));
            };
            if tensor.len() != tensor.shape.iter().product::<usize>() {
                return Err(InputError::invalid(format!(
                    "`{name}` has {} values for shape {:?}",
                    tensor.len(),
                    tensor.shape
                )));
            }
            match len {
                None => len = Some(n),
                Some(m) if m != n => {
                    return Err(InputError::invalid(format!("`{name}` has {n} examples but another tensor has {m}")));
                }
                Some(_) => {}
            }
            let info = FeatureInfo::new(name, tensor.dtype(), shape.to_vec());
            if is_label {
                label = Some(info)
            } else {
                infos.push(info)
            }
            columns.push(tensor);
        }
        let schema = Schema::new(infos, label)?;
        Ok(TensorSource { schema, columns, len: len.unwrap_or(0) as u64 })
    }
}

impl Source for TensorSource {
    fn describe(&self) -> String {
        format!("tensors({:?}, n={})", self.schema, self.len)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn files(&self) -> &[FileSpan] {
        &[]
    }

    fn read(&self, index: u64) -> Result<Row> {
        super::row_from_read_into(self, index)
    }

    fn read_into(&self, index: u64, columns: &mut [HostData]) -> Result<()> {
        if columns.len() != self.columns.len() {
            return Err(InputError::invalid(format!(
                "example {index} has {} columns, expected {}",
                self.columns.len(),
                columns.len()
            )));
        }
        let i = index as usize;
        for ((column, tensor), info) in columns.iter_mut().zip(&self.columns).zip(self.schema.columns()) {
            let range = example_range(i, info.size());
            let out = || InputError::invalid(format!("example {index} out of range"));
            match (column, &tensor.data) {
                (HostData::F32(d), HostData::F32(v)) => d.extend_from_slice(v.get(range).ok_or_else(out)?),
                (HostData::I64(d), HostData::I64(v)) => d.extend_from_slice(v.get(range).ok_or_else(out)?),
                (HostData::Bool(d), HostData::Bool(v)) => d.extend_from_slice(v.get(range).ok_or_else(out)?),
                (column, _) => return Err(mismatch(index, info, info.size(), column.dtype())),
            }
        }
        Ok(())
    }

    fn prefetch(&self, index: u64) {
        let i = index as usize;
        for (tensor, info) in self.columns.iter().zip(self.schema.columns()) {
            let range = example_range(i, info.size());
            match &tensor.data {
                HostData::F32(v) => super::cache_hint::prefetch(v.get(range).unwrap_or(&[])),
                HostData::I64(v) => super::cache_hint::prefetch(v.get(range).unwrap_or(&[])),
                HostData::Bool(v) => super::cache_hint::prefetch(v.get(range).unwrap_or(&[])),
            }
        }
    }
}

/// Where example `i` sits in a column of `size` values per example.
fn example_range(i: usize, size: usize) -> std::ops::Range<usize> {
    i * size..(i + 1) * size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_slice_the_first_dimension() {
        let mut features = BTreeMap::new();
        features.insert("x".to_string(), HostTensor::f32(vec![3, 2], vec![0., 1., 2., 3., 4., 5.]).unwrap());
        let src = TensorSource::new(features, Some(HostTensor::i64(vec![3], vec![7, 8, 9]).unwrap())).unwrap();
        assert_eq!(src.len(), 3);
        let row = src.read(2).unwrap();
        assert_eq!(row.values, vec![HostData::F32(vec![4., 5.]), HostData::I64(vec![9])]);
    }

    #[test]
    fn read_into_appends_what_read_returns() {
        let mut features = BTreeMap::new();
        features.insert("x".to_string(), HostTensor::f32(vec![3, 2], vec![0., 1., 2., 3., 4., 5.]).unwrap());
        let src = TensorSource::new(features, Some(HostTensor::i64(vec![3], vec![7, 8, 9]).unwrap())).unwrap();
        let mut columns = vec![HostData::F32(vec![]), HostData::I64(vec![])];
        src.read_into(2, &mut columns).unwrap();
        src.read_into(0, &mut columns).unwrap();
        assert_eq!(columns, vec![HostData::F32(vec![4., 5., 0., 1.]), HostData::I64(vec![9, 7])]);
        assert!(src.read_into(3, &mut columns).is_err());
        assert!(src.read_into(0, &mut [HostData::F32(vec![]), HostData::F32(vec![])]).is_err());
    }

    #[test]
    fn example_counts_must_agree() {
        let mut features = BTreeMap::new();
        features.insert("x".to_string(), HostTensor::f32(vec![3], vec![0., 1., 2.]).unwrap());
        let err = TensorSource::new(features, Some(HostTensor::i64(vec![2], vec![7, 8]).unwrap())).unwrap_err();
        assert!(err.to_string().contains("2 examples"), "{err}");
    }
}
