//! The root of a job spec.

use super::{
    input::InputSection,
    loss::{Loss, Metric},
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
    pub loss: Loss,
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
}
