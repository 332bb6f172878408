//! The RON job spec: its schema, parsing with locations, `--set` overrides and validation.
//!
//! Text is parsed into a located value tree ([`syntax`]), overrides are applied to the
//! tree, and the typed [`Job`] is deserialized from it by a deserializer that attaches
//! `file:line:col` and the field path to every error. The tree is kept beside the job, so
//! errors found later (a shape mismatch during lowering) are located by path too.
//!
//! ```
//! use engine_cli::spec::{Spec, Override};
//!
//! let text = r#"Job(
//!     model: Sequential(input_shape: [4], layers: [Dense(units: 3)]),
//!     loss: SparseCategoricalCrossentropy(from_logits: true),
//!     optimizer: SGD(learning_rate: 0.1),
//!     train_input: Idx(images: "i.gz", labels: "l.gz", batch_size: 8),
//!     run_config: (model_dir: "runs/x"),
//! )"#;
//! let spec = Spec::parse(text, "job.ron", &[Override::parse("train_spec.max_steps=10")?])?;
//! assert_eq!(spec.job.train_spec.max_steps, Some(10));
//!
//! let err = Spec::parse(&text.replace("units", "unit"), "job.ron", &[]).unwrap_err();
//! assert!(err.to_string().starts_with("job.ron:2:56: model.layers[0].unit: unknown field `unit`"));
//! # Ok::<(), engine_cli::spec::SpecError>(())
//! ```

mod attention;
mod de;
mod error;
mod exporter;
mod input;
mod job;
mod layer;
mod loss;
mod model;
pub mod names;
mod normalization;
mod optimizer;
mod overrides;
mod path;
mod run_config;
pub mod syntax;
mod validate;

pub use attention::{AddPositionEmbedding, Embedding, MultiHeadAttention};
pub use de::{RawSection, SectionKinds};
pub use engine_estimator::strategy::{StrategyKind, UnknownStrategy};
pub use engine_runtime::Precision;
pub use error::{ErrorKind, Location, Origin, SpecError};
pub use exporter::{Exporter, MAX_EXPORTS_TO_KEEP};
pub use input::{HookSection, InputSection, input_batch_size};
pub use job::{Job, WarmStart};
pub use layer::{
    Activation, Concatenate, Conv2d, Dense, Dropout, Layer, MAX_MERGE_INPUTS, Pool2d, Regularizer, Reshape, Size2,
    ZeroPadding2D,
};
pub use loss::{Average, Loss, LossSpec, Metric};
pub use model::{Functional, FunctionalNode, Model, Sequential};
pub use normalization::{BatchNormalization, LayerNormalization};
pub use optimizer::{Adagrad, Adam, AdamW, LearningRateSpec, OptimizerSpec, RmsProp, Sgd};
pub use overrides::Override;
pub use path::{FieldPath, Segment};
pub use run_config::{EvalSpec, MAX_ELASTIC_WORKERS, MAX_SHARDS, NonFinite, RunConfig, TrainSpec, VariablePartitioner};

use serde::de::DeserializeOwned;
use std::path::Path;
use syntax::Node;

/// A validated job with the located tree it came from.
#[derive(Debug, Clone)]
pub struct Spec {
    pub job: Job,
    tree: Node,
    file: String,
}

impl Spec {
    /// Reads, overrides, deserializes and validates a spec file.
    pub fn from_file(path: impl AsRef<Path>, overrides: &[Override]) -> Result<Spec, SpecError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| SpecError::io(&name, e))?;
        Spec::parse(&text, &name, overrides)
    }

    /// As [`Spec::from_file`], for text already in memory; `file` names it in errors.
    pub fn parse(text: &str, file: &str, overrides: &[Override]) -> Result<Spec, SpecError> {
        let mut tree = syntax::parse_document(text, &Origin::File(file.into()))?;
        for o in overrides {
            o.apply(&mut tree)?;
        }
        let job: Job = de::from_node(&tree, FieldPath::root())?;
        let spec = Spec { job, tree, file: file.to_string() };
        validate::validate(&spec)?;
        for (at, old, new) in names::old_names_in(&spec.tree) {
            log::warn!("{at}: `{old}` is the engine's earlier name for Keras' `{new}`; write `{new}`");
        }
        Ok(spec)
    }

    /// The file the spec was read from (as given).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The located tree, overrides applied.
    pub fn tree(&self) -> &Node {
        &self.tree
    }

    /// The node exactly at `path`, if the spec writes it.
    pub fn node(&self, path: &FieldPath) -> Option<&Node> {
        self.tree.get(path)
    }

    /// Where `path` is written, or the nearest enclosing value that is (a field left to
    /// its default is reported at the struct that omits it).
    pub fn locate(&self, path: &FieldPath) -> Location {
        self.tree.locate(path).loc.clone()
    }

    /// A located error about the value at `path`.
    pub fn error(&self, path: FieldPath, kind: ErrorKind) -> SpecError {
        SpecError::new(Some(self.locate(&path)), path, kind)
    }

    /// Deserializes the subtree at `path` (an input section, a hook) with located errors.
    pub fn decode<T: DeserializeOwned>(&self, path: &FieldPath) -> Result<T, SpecError> {
        let node = self.node(path).ok_or_else(|| {
            self.error(path.clone(), ErrorKind::Invalid(format!("the spec has no value at `{path}`")))
        })?;
        de::from_node(node, path.clone())
    }
}
