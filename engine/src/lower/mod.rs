//! Lowering a job spec to graph nodes, and compiling graphs to plans.
//!
//! [`build_model`] wires a spec's model, loss and predictions into a graph with Keras'
//! variable names; [`compile`] (and [`training_plan`], [`eval_plan`], [`predict_plan`])
//! adds gradients and optimizer updates for training, runs the optimization passes and
//! schedules the result. Shape errors are reported at the layer's place in the spec.
//!
//! ```
//! use engine_cli::{lower, spec::{Spec, StrategyKind}};
//!
//! let spec = Spec::parse(r#"Job(
//!     model: Sequential(input_shape: [4], layers: [Dense(units: 8, activation: Relu), Dense(units: 3)]),
//!     loss: SparseCategoricalCrossentropy(from_logits: true),
//!     optimizer: Adam(),
//!     train_input: Idx(images: "i.gz", labels: "l.gz", batch_size: 8),
//!     run_config: (model_dir: "runs/x"),
//! )"#, "job.ron", &[])?;
//! let plan = lower::training_plan(&spec, StrategyKind::Default)?;
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
mod summary;

pub use build::{LayerOutput, ModelGraph, ProvidedInputs, build_model, build_model_on};
pub use error::LowerError;
pub use limits::{MAX_ELEMENTS, MAX_LAYER_FLOPS};
pub use plan::{compile, eval_plan, predict_plan, training_plan};
pub use sequential::FEATURES;
pub use summary::{LayerSummary, ModelSummary, summary};

/// What a graph is built for: the estimator's mode, so the spec's lowering and the model
/// functions agree on one type.
pub use engine_estimator::Mode;

#[cfg(test)]
mod tests;
