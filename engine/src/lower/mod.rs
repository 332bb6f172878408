//! Lowering a job spec to graph nodes, and compiling graphs to plans.
//!
//! [`build_model`] wires a spec's model, loss and predictions into a graph with Keras'
//! variable names; [`compile`] (and [`training_plan`], [`eval_plan`], [`predict_plan`])
//! adds gradients and optimizer updates for training, runs the optimization passes and
//! schedules the result. Shape errors are reported at the layer's place in the spec.
//!
//! ```
//! use engine_cli::{lower, spec::{Spec, Strategy}};
//!
//! let spec = Spec::parse(r#"Job(
//!     model: Sequential(input_shape: [4], layers: [Dense(units: 8, activation: Relu), Dense(units: 3)]),
//!     loss: SparseSoftmaxCrossEntropy,
//!     optimizer: Adam(),
//!     train_input: Idx(images: "i.gz", labels: "l.gz", batch_size: 8),
//!     run_config: (model_dir: "runs/x"),
//! )"#, "job.ron", &[])?;
//! let plan = lower::training_plan(&spec, Strategy::Default)?;
//! assert!(plan.graph.roles.train_op.is_some());
//! assert_eq!(plan.graph.roles.gradients.len(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod build;
mod error;
mod functional;
mod head;
mod layers;
mod limits;
mod plan;
mod sequential;

pub use build::{LayerOutput, ModelGraph, ProvidedInputs, build_model, build_model_on};
pub use error::LowerError;
pub use limits::{MAX_ELEMENTS, MAX_LAYER_FLOPS};
pub use plan::{compile, compile_with, eval_plan, predict_plan, training_plan};
pub use sequential::FEATURES;

use std::{fmt, str::FromStr};

/// What a graph is built for, as TensorFlow's `ModeKeys`: training has dropout, labels
/// and a loss; evaluation has labels and a loss; prediction has neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Train,
    Eval,
    Predict,
}

impl Mode {
    pub const NAMES: &'static [&'static str] = &["train", "eval", "predict"];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Eval => "eval",
            Mode::Predict => "predict",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [Mode::Train, Mode::Eval, Mode::Predict]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown mode `{s}`, expected one of: {}", Mode::NAMES.join(", ")))
    }
}

#[cfg(test)]
mod tests;
