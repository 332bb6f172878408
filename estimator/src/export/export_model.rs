//! `Estimator::export_saved_model`: the predict graph and a checkpoint's variables as an
//! export directory (see the module documentation for its layout).

use super::{GRAPH, MANIFEST, ONNX, VARIABLES, manifest, write::write_export};
use crate::{
    Estimator, EstimatorError, Mode, Result,
    checkpoint::{CheckpointMeta, format::encode, unix_now},
    input::Schema,
    model_dir::ModelDir,
    session::{build_model, compile_plan},
    strategy::{StrategyKind, StrategyOptions},
};
use engine_graph::{Graph, HostTensor, Op, onnx};
use std::collections::BTreeMap;

impl Estimator {
    /// TensorFlow's `export_saved_model`: writes `<export_dir_base>/<timestamp>/` from the
    /// checkpoint at `checkpoint_path`, or the latest one, and returns its location.
    pub fn export_saved_model(
        &self,
        export_dir_base: &str,
        serving_input: &super::ServingInput,
        checkpoint_path: Option<&str>,
    ) -> Result<String> {
        let base = ModelDir::open_with(export_dir_base, self.config().s3.as_ref())?;
        let name = fresh_timestamp(&base)?;
        self.export_to(&base, &name, serving_input, checkpoint_path)
    }

    /// Writes the export as `base/name/` (never over an existing one).
    pub fn export_to(
        &self,
        base: &ModelDir,
        name: &str,
        serving_input: &super::ServingInput,
        checkpoint_path: Option<&str>,
    ) -> Result<String> {
        self.export_with_metrics(base, name, serving_input, checkpoint_path, &BTreeMap::new())
    }

    /// As [`Estimator::export_to`], recording the evaluation `metrics` in the manifest.
    pub(crate) fn export_with_metrics(
        &self,
        base: &ModelDir,
        name: &str,
        serving_input: &super::ServingInput,
        checkpoint_path: Option<&str>,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<String> {
        let checkpoint = self.checkpoint_for(checkpoint_path, "export")?;
        let schema = Schema::new(serving_input.features.clone(), None)?;
        let mut graph = Graph::new();
        let preprocessing = &serving_input.preprocessing;
        build_model(&mut graph, self.model_fn.as_ref(), &self.params, Mode::Predict, &schema, preprocessing)?;
        let def = graph.to_def()?;
        let variables = variables_of(&graph, &checkpoint.tensors, &checkpoint.path)?;

        // ONNX from the plan the engine runs: optimized, placed on the CPU.
        let strategy = StrategyKind::Default.build(&StrategyOptions::default())?;
        let plan = compile_plan(graph.clone(), None, strategy.as_ref())?;
        let mut metadata = BTreeMap::new();
        metadata.insert("checkpoint".to_string(), checkpoint.path.clone());
        metadata.insert("global_step".to_string(), checkpoint.step.to_string());
        let options = onnx::OnnxOptions {
            graph_name: "serving_default".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            metadata,
        };
        let onnx_bytes = onnx::to_onnx(&plan.graph, &variables, &options)?;

        let signature = manifest::Signature {
            inputs: graph
                .roles
                .inputs
                .iter()
                .map(|(k, o)| Ok(manifest::TensorSpec::of(k, graph.fact(*o)?)))
                .collect::<Result<_>>()?,
            outputs: graph
                .roles
                .predictions
                .iter()
                .map(|(k, o)| Ok(manifest::TensorSpec::of(k, graph.fact(*o)?)))
                .collect::<Result<_>>()?,
        };
        let meta = CheckpointMeta { fingerprint: graph.fingerprint()?, ..CheckpointMeta::default() };
        let created = unix_now();
        let files: Vec<(&str, Vec<u8>)> = vec![
            (GRAPH, serde_json::to_vec_pretty(&def).map_err(|e| EstimatorError::Other(e.to_string()))?),
            (VARIABLES, encode(checkpoint.step, &variables, &meta, created)?),
            (ONNX, onnx_bytes),
        ];
        let manifest = manifest::Manifest {
            format: manifest::FORMAT.into(),
            format_version: manifest::FORMAT_VERSION,
            signature,
            checkpoint: checkpoint.path.clone(),
            global_step: checkpoint.step,
            created_unix: created,
            files: files.iter().map(|(n, d)| (n.to_string(), super::FileEntry::of(d))).collect(),
            metrics: metrics.clone(),
            class_names: serving_input.class_names.clone(),
            preprocessing: serving_input.preprocessing.iter().map(super::preprocess::describe).collect(),
        };
        let manifest = serde_json::to_vec_pretty(&manifest).map_err(|e| EstimatorError::Other(e.to_string()))?;
        let at = write_export(base, name, &files, manifest)?;
        log::info!("Exported {} (step {}) to {at}", checkpoint.path, checkpoint.step);
        Ok(at)
    }
}

/// The values of the variables the graph reads, from a checkpoint.
fn variables_of(
    graph: &Graph,
    tensors: &BTreeMap<String, HostTensor>,
    checkpoint: &str,
) -> Result<BTreeMap<String, HostTensor>> {
    let mut out = BTreeMap::new();
    for (_, node) in graph.nodes() {
        if let Op::Variable(_) = node.op {
            let t = tensors.get(&node.name).ok_or_else(|| {
                EstimatorError::Other(format!("the checkpoint {checkpoint} has no variable '{}'", node.name))
            })?;
            out.insert(node.name.clone(), t.clone());
        }
    }
    Ok(out)
}

/// TensorFlow names exports by the Unix time in seconds; two in one second get the next.
pub(crate) fn fresh_timestamp(base: &ModelDir) -> Result<String> {
    let mut t = unix_now() as u64;
    loop {
        let name = t.to_string();
        let taken = match base.local_root() {
            Some(root) => root.join(&name).exists(),
            None => base.exists(&format!("{name}/{MANIFEST}"))?,
        };
        if !taken {
            return Ok(name);
        }
        t += 1;
    }
}
