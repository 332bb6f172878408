//! Loads an export and runs it: what `engine serve` answers requests with.

use super::{GRAPH, MANIFEST, Manifest, SavedGraph, VARIABLES, manifest};
use crate::{
    EstimatorError, Mode, Result,
    checkpoint::format::decode,
    input::{Batch, FeatureInfo, Schema},
    model_dir::{ModelDir, S3Options},
    session::{Compiled, Replicas, compile},
    strategy::{StrategyKind, StrategyOptions},
};
use engine_graph::{GraphDef, HostTensor, Outlet};
use engine_runtime::{Precision, RunOptions};
use std::collections::BTreeMap;

/// An export read and verified: its manifest, graph and variables.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    pub location: String,
    pub manifest: Manifest,
    pub graph: GraphDef,
    pub variables: BTreeMap<String, HostTensor>,
}

impl LoadedModel {
    /// Reads the export at `location` (a directory or `s3://` prefix). Refuses one without
    /// its manifest (not yet, or never, committed), of another format, or whose files do
    /// not match the sizes and checksums the manifest records.
    /// Reads an export, or, given a directory of exports (an exporter's
    /// `export/<name>/`, TensorFlow Serving's model base path), its newest complete one.
    pub fn load_latest(location: &str, s3: Option<&S3Options>) -> Result<Self> {
        let dir = ModelDir::open_with(location, s3)?;
        if dir.exists(MANIFEST)? {
            return Self::load(location, s3);
        }
        match super::exporters::versions(&dir, "")?.last() {
            Some(version) => Self::load(&dir.url_of(&version.to_string()), s3),
            None if dir.exists(crate::checkpoint::STATE_FILE)? => Err(EstimatorError::Other(format!(
                "{location} is a model dir, not an export: serve one of its exports, {location}/export/NAME (what \
                 eval_spec.exporters write), or write one with `engine export`"
            ))),
            None => Err(EstimatorError::Other(format!(
                "{location} holds no export: neither a {MANIFEST} nor numbered export directories with one"
            ))),
        }
    }

    pub fn load(location: &str, s3: Option<&S3Options>) -> Result<Self> {
        let dir = ModelDir::open_with(location, s3)?;
        let bad = |reason: String| EstimatorError::Other(format!("{location} is not a usable export: {reason}"));
        let manifest_bytes = dir.get_if_exists(MANIFEST)?.ok_or_else(|| {
            bad(format!("it has no {MANIFEST} (an export that was never completed, or not an export)"))
        })?;
        let manifest: Manifest =
            serde_json::from_slice(&manifest_bytes.data).map_err(|e| bad(format!("{MANIFEST} cannot be read: {e}")))?;
        if manifest.format != manifest::FORMAT || manifest.format_version > manifest::FORMAT_VERSION {
            return Err(bad(format!(
                "it is {} version {}; this engine reads {} up to version {}",
                manifest.format,
                manifest.format_version,
                manifest::FORMAT,
                manifest::FORMAT_VERSION
            )));
        }
        let mut files = BTreeMap::new();
        for name in [GRAPH, VARIABLES] {
            let entry = manifest.files.get(name).ok_or_else(|| bad(format!("{MANIFEST} lists no {name}")))?;
            let data = dir.get(name)?;
            if super::FileEntry::of(&data) != *entry {
                return Err(bad(format!("{name} does not match the size and checksum {MANIFEST} records")));
            }
            files.insert(name, data);
        }
        let graph: GraphDef =
            serde_json::from_slice(&files[GRAPH]).map_err(|e| bad(format!("{GRAPH} cannot be read: {e}")))?;
        let variables = decode(&files[VARIABLES], &dir.url_of(VARIABLES), VARIABLES)?.tensors;
        Ok(LoadedModel { location: location.to_string(), manifest, graph, variables })
    }
}

/// A compiled export with its variables on a device, answering batches.
pub struct Predictor {
    /// Holds the plan the replicas run.
    _compiled: Compiled,
    replicas: Replicas,
    signature: super::Signature,
    outputs: Vec<Outlet>,
}

impl Predictor {
    /// Compiles the export's graph for `device` as `predict` would.
    pub fn new(model: &LoadedModel, device: engine_runtime::DeviceName, precision: Precision) -> Result<Self> {
        let signature = model.manifest.signature.clone();
        let features =
            signature.inputs.iter().map(|t| FeatureInfo::new(&t.name, t.dtype, t.example_shape())).collect::<Vec<_>>();
        let schema = Schema::new(features, None)?;
        let options = StrategyOptions { device, ..StrategyOptions::default() };
        let strategy = StrategyKind::Default.build(&options)?;
        let model_fn = SavedGraph { def: model.graph.clone() };
        let compiled = compile(&model_fn, &serde_json::Value::Null, Mode::Predict, &schema, strategy.as_ref(), &[])?;
        let mut replicas = Replicas::new(&compiled, strategy.as_ref(), precision)?;
        replicas.restore(&model.variables, 0)?;
        let outputs = signature
            .outputs
            .iter()
            .map(|t| {
                compiled.predictions.get(&t.name).copied().ok_or_else(|| {
                    EstimatorError::Other(format!(
                        "the signature's output '{}' is not a prediction of the graph",
                        t.name
                    ))
                })
            })
            .collect::<Result<_>>()?;
        Ok(Predictor { _compiled: compiled, replicas, signature, outputs })
    }

    pub fn signature(&self) -> &super::Signature {
        &self.signature
    }

    /// Runs one batch: every signature input by name, all with the same leading (batch)
    /// dimension. Returns every output by name, batch-major.
    pub fn predict(&mut self, mut inputs: BTreeMap<String, HostTensor>) -> Result<BTreeMap<String, HostTensor>> {
        let rows = self.check(&inputs)?;
        let features: BTreeMap<String, HostTensor> =
            self.signature.inputs.iter().filter_map(|t| inputs.remove_entry(&t.name)).collect();
        let batch = Batch { features, labels: None, len: rows, ids: (0..rows as u64).collect() };
        let out = self.replicas.run(vec![batch], &self.outputs, RunOptions::default())?;
        let step = out.into_iter().next().ok_or_else(|| EstimatorError::Other("the step returned nothing".into()))?;
        let mut result = BTreeMap::new();
        for (spec, value) in self.signature.outputs.iter().zip(step.fetched) {
            result.insert(spec.name.clone(), value.to_host()?);
        }
        Ok(result)
    }

    /// The batch size, or a request error naming what does not match the signature.
    fn check(&self, inputs: &BTreeMap<String, HostTensor>) -> Result<usize> {
        let names = || self.signature.inputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ");
        if let Some(extra) = inputs.keys().find(|k| !self.signature.inputs.iter().any(|t| &t.name == *k)) {
            return Err(EstimatorError::Request(format!("unknown input '{extra}'; the model takes: {}", names())));
        }
        let mut rows = None;
        for spec in &self.signature.inputs {
            let t = inputs.get(&spec.name).ok_or_else(|| {
                EstimatorError::Request(format!("missing input '{}'; the model takes: {}", spec.name, names()))
            })?;
            if t.data.dtype() != spec.dtype {
                return Err(EstimatorError::Request(format!(
                    "input '{}' must be {}, found {}",
                    spec.name,
                    spec.dtype,
                    t.data.dtype()
                )));
            }
            let example = spec.example_shape();
            if t.shape.len() != example.len() + 1 || t.shape[1..] != example[..] {
                return Err(EstimatorError::Request(format!(
                    "input '{}' must have shape [batch, {}], found {:?}",
                    spec.name,
                    example.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
                    t.shape
                )));
            }
            match rows {
                None => rows = Some(t.shape[0]),
                Some(r) if r != t.shape[0] => {
                    return Err(EstimatorError::Request(format!(
                        "inputs disagree on the batch size: {r} and {} ('{}')",
                        t.shape[0], spec.name
                    )));
                }
                _ => {}
            }
        }
        match rows {
            Some(0) | None => Err(EstimatorError::Request("a request needs at least one example".into())),
            Some(r) => Ok(r),
        }
    }
}
