//! Exports for serving: TensorFlow's `export_saved_model` and its `Exporter`s.
//!
//! An export is a directory that runs without the code or spec that trained it:
//!
//! - `saved_model.json`: the manifest, written last: format version, the signature (inputs
//!   and outputs with dtypes and shapes, `-1` for the batch), the checkpoint and global step
//!   it came from, and each other file's size and CRC-32C;
//! - `graph.json`: the inference graph before any pass ([`engine_graph::GraphDef`]), which
//!   a loader compiles for its own device as training compiled it;
//! - `variables.safetensors`: the variables that graph reads, checksummed;
//! - `model.onnx`: the same model for other runtimes (onnxruntime, TensorRT), from the
//!   optimized plan.
//!
//! A reader never sees a half-written export: on a local disk the directory is built under
//! a temporary name and renamed into place; on an object store, where a directory is only
//! a prefix, the manifest is the commit point (loaders and exporters ignore a prefix
//! without one, and check the files against it).

mod export_model;
mod exporters;
mod manifest;
mod predictor;
mod preprocess;
mod saved_graph;
mod serving_input;
mod write;

pub use exporters::{BestExporter, Compare, FinalExporter, LatestExporter, exports};
pub use manifest::{FileEntry, Manifest, Signature, TensorSpec};
pub use predictor::{LoadedModel, Predictor};
pub use preprocess::{describe as describe_preprocessing, preprocess};
pub use saved_graph::SavedGraph;
pub use serving_input::ServingInput;

/// File names inside an export.
pub const MANIFEST: &str = "saved_model.json";
pub const GRAPH: &str = "graph.json";
pub const VARIABLES: &str = "variables.safetensors";
pub const ONNX: &str = "model.onnx";
