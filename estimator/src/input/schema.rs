//! What an example holds: named, typed, fixed-shape columns.
//!
//! Every source knows its schema when it is opened, and every map knows how it changes it,
//! so a pipeline is type-checked before it reads a byte, and examples travel as positional
//! rows (`Row`) instead of maps keyed by strings: the per-example cost stays a few
//! allocations, which is what lets the pipeline run far ahead of training.

use super::error::{InputError, Result};
use engine_graph::{DType, HostData};
use serde::{Deserialize, Serialize};

/// One named column of an example: its element type and per-example shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl FeatureInfo {
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<usize>) -> Self {
        FeatureInfo { name: name.into(), dtype, shape }
    }

    /// Elements per example.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The columns of every example of a dataset: features, then the optional label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    pub features: Vec<FeatureInfo>,
    pub label: Option<FeatureInfo>,
}

impl Schema {
    /// Checks that names are unique across features and label, since maps address columns
    /// by name.
    pub fn new(features: Vec<FeatureInfo>, label: Option<FeatureInfo>) -> Result<Self> {
        let schema = Schema { features, label };
        let mut names: Vec<&str> = schema.columns().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(InputError::invalid(format!("two columns are named `{}`", pair[0])));
        }
        Ok(schema)
    }

    /// Features in order, then the label.
    pub fn columns(&self) -> impl Iterator<Item = &FeatureInfo> {
        self.features.iter().chain(self.label.iter())
    }

    pub fn num_columns(&self) -> usize {
        self.features.len() + usize::from(self.label.is_some())
    }

    pub(crate) fn column(&self, index: usize) -> Option<&FeatureInfo> {
        if index < self.features.len() { self.features.get(index) } else { self.label.as_ref() }
    }

    pub(crate) fn column_mut(&mut self, index: usize) -> Option<&mut FeatureInfo> {
        if index < self.features.len() { self.features.get_mut(index) } else { self.label.as_mut() }
    }

    /// The position of a column in a row, or an error listing the names there are.
    pub(crate) fn index_of(&self, name: &str) -> Result<usize> {
        self.columns().position(|c| c.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.columns().map(|c| c.name.as_str()).collect();
            InputError::invalid(format!("no feature or label named `{name}`; the dataset has: {}", names.join(", ")))
        })
    }

    pub(crate) fn label_index(&self) -> Option<usize> {
        self.label.as_ref().map(|_| self.features.len())
    }
}

/// One example's values, positionally matching `Schema::columns`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub values: Vec<HostData>,
}

/// An empty vector of a dtype, with room for `capacity` elements.
pub(crate) fn host_data_with_capacity(dtype: DType, capacity: usize) -> HostData {
    match dtype {
        DType::F32 => HostData::F32(Vec::with_capacity(capacity)),
        DType::I64 => HostData::I64(Vec::with_capacity(capacity)),
        DType::Bool => HostData::Bool(Vec::with_capacity(capacity)),
    }
}

/// Appends `src` to `dst`; false when their dtypes differ.
pub(crate) fn append_host_data(dst: &mut HostData, src: &HostData) -> bool {
    match (dst, src) {
        (HostData::F32(d), HostData::F32(s)) => d.extend_from_slice(s),
        (HostData::I64(d), HostData::I64(s)) => d.extend_from_slice(s),
        (HostData::Bool(d), HostData::Bool(s)) => d.extend_from_slice(s),
        _ => return false,
    }
    true
}

/// Appends one example's values to a batch's columns, after checking that they are the
/// schema's: as many columns, each of its dtype and per-example size.
pub(crate) fn append_row(columns: &mut [HostData], schema: &Schema, id: u64, row: &Row) -> Result<()> {
    if row.values.len() != columns.len() {
        return Err(InputError::invalid(format!(
            "example {id} has {} columns, expected {}",
            row.values.len(),
            columns.len()
        )));
    }
    for ((column, value), info) in columns.iter_mut().zip(&row.values).zip(schema.columns()) {
        if value.len() != info.size() || !append_host_data(column, value) {
            return Err(mismatch(id, info, value.len(), value.dtype()));
        }
    }
    Ok(())
}

/// The error for a value that is not what its column's schema says.
pub(crate) fn mismatch(id: u64, info: &FeatureInfo, len: usize, dtype: DType) -> InputError {
    InputError::invalid(format!(
        "example {id}: `{}` is {len} values of {dtype}, the schema says {:?} of {}",
        info.name, info.shape, info.dtype
    ))
}

/// Appends `n` zeros (padding rows of evaluation batches).
pub(crate) fn append_zeros(dst: &mut HostData, n: usize) {
    match dst {
        HostData::F32(d) => d.resize(d.len() + n, 0.0),
        HostData::I64(d) => d.resize(d.len() + n, 0),
        HostData::Bool(d) => d.resize(d.len() + n, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_names_are_rejected() {
        let f = FeatureInfo::new("x", DType::F32, vec![2]);
        let err = Schema::new(vec![f.clone()], Some(FeatureInfo::new("x", DType::I64, vec![]))).unwrap_err();
        assert!(err.to_string().contains("`x`"), "{err}");
    }

    #[test]
    fn unknown_name_lists_the_columns() {
        let schema = Schema::new(
            vec![FeatureInfo::new("a", DType::F32, vec![])],
            Some(FeatureInfo::new("y", DType::I64, vec![])),
        )
        .unwrap();
        assert_eq!(schema.index_of("y").unwrap(), 1);
        let err = schema.index_of("b").unwrap_err().to_string();
        assert!(err.contains("a, y"), "{err}");
    }
}
