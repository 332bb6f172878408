//! `saved_model.json`: what an export holds and how to call it.

use engine_graph::{DType, Dim, Fact};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The format an export declares, so that a loader refuses one it does not understand.
pub const FORMAT: &str = "engine-saved-model";
pub const FORMAT_VERSION: u32 = 1;

/// One input or output of the signature. `shape[0]` is `-1`: any batch size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
}

impl TensorSpec {
    /// From a graph fact; batch-sized dimensions become `-1`.
    pub fn of(name: &str, fact: &Fact) -> Self {
        let shape = fact.shape.dims().iter().map(|d| if let Dim::Known(n) = d { *n as i64 } else { -1 }).collect();
        TensorSpec { name: name.to_string(), dtype: fact.dtype, shape }
    }

    /// The shape of one example (everything after the batch dimension).
    pub fn example_shape(&self) -> Vec<usize> {
        self.shape.iter().skip(1).map(|d| (*d).max(0) as usize).collect()
    }
}

/// TensorFlow's `serving_default` signature: named inputs to named outputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

/// A file of the export, checked on load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub bytes: u64,
    pub crc32c: u32,
}

impl FileEntry {
    pub fn of(data: &[u8]) -> Self {
        FileEntry { bytes: data.len() as u64, crc32c: crc32c::crc32c(data) }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub signature: Signature,
    /// The checkpoint the variables came from, and its global step.
    pub checkpoint: String,
    pub global_step: u64,
    /// Seconds since the epoch when the export was written.
    pub created_unix: f64,
    pub files: BTreeMap<String, FileEntry>,
    /// The evaluation that led to the export, when an exporter made it: how a restarted
    /// `BestExporter` knows the best so far.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
    /// The names of the classes the `classes` output numbers (a label vocabulary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_names: Option<Vec<String>>,
    /// The input transforms the graph runs before the model (`Scale(255.0)`): a request
    /// carries the features before them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preprocessing: Vec<String>,
}
