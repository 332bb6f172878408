//! The root of a job spec.

use super::{
    input::InputSection,
    loss::{LossSpec, Metric},
    model::Model,
    optimizer::OptimizerSpec,
    run_config::{EvalSpec, RunConfig, TrainSpec},
};
use serde::Deserialize;

/// `Job(model: ..., loss: ..., optimizer: ..., ...)`: everything `engine run` needs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    pub model: Model,
    pub loss: LossSpec,
    /// Cross-entropy against smoothed labels: `labels * (1 - s) + s / classes` for the
    /// softmax losses, `labels * (1 - s) + s / 2` for the sigmoid one (Keras'
    /// `label_smoothing`). 0 turns it off.
    #[serde(default)]
    pub label_smoothing: f32,
    pub optimizer: OptimizerSpec,
    #[serde(default)]
    pub metrics: Vec<Metric>,
    pub train_input: InputSection,
    #[serde(default)]
    pub eval_input: Option<InputSection>,
    pub run_config: RunConfig,
    #[serde(default)]
    pub train_spec: TrainSpec,
    #[serde(default)]
    pub eval_spec: EvalSpec,
    /// Start the trainable variables from another run's checkpoint, as TensorFlow's
    /// `warm_start_from` does: `Some(WarmStart(checkpoint: "old/model.ckpt-2814",
    /// vars_to_warm_start: "conv2d/.*"))`. Optimizer slots and the global step start fresh.
    /// Used only when the model dir has no checkpoint of its own (a resumed run resumes).
    #[serde(default)]
    pub warm_start_from: Option<WarmStart>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmStart {
    /// A checkpoint path or URL (`model.ckpt-N` in another model dir).
    pub checkpoint: String,
    /// A regular expression over variable names; by default every trainable variable.
    #[serde(default = "every_variable")]
    pub vars_to_warm_start: String,
}

fn every_variable() -> String {
    ".*".into()
}
