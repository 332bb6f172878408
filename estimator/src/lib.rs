//! TensorFlow's Estimator workflow over the engine's compiler and runtime.
//!
//! A model function builds graph nodes for a mode and returns an [`EstimatorSpec`]; an
//! input function returns a [`input::Dataset`]; the [`Estimator`] compiles, places and
//! distributes the graph with its strategy's passes and drives `train`, `evaluate` and
//! `predict` with hooks, checkpoints in a model directory (local or object store) and
//! TensorBoard summaries. [`train_and_evaluate`] alternates training and evaluation with
//! TensorFlow's semantics, or runs one role of a cluster.

pub mod checkpoint;
pub mod distribute;
mod distributed;
mod error;
mod estimator;
mod estimator_spec;
mod eval_summaries;
pub mod export;
pub mod hooks;
pub mod input;
pub mod metrics;
mod mode;
pub mod model_dir;
mod model_fn;
pub(crate) mod once;
pub mod preemption;
mod resources;
mod run_config;
mod session;
pub mod strategy;
pub mod summary;
mod train_and_evaluate;
mod train_eval_spec;
mod warm_start;

pub use error::{EstimatorError, Result};
pub use estimator::{ConfusionMatrices, Estimator, EvalResult, Evaluator, StepLimit};
pub use estimator_spec::{EstimatorSpec, TrainOp};
pub use mode::Mode;
pub use model_fn::{Features, InputFn, ModelFn, Params};
pub use resources::Resources;
pub use run_config::{CheckpointTrigger, ClusterToken, NonFinitePolicy, RunConfig};
pub use session::{
    EXAMPLE_LOG_ENV, PIPELINE_ENV, Predictions, TrainOutcome, check_model_memory, compile_plan, plan_for,
};
pub use train_and_evaluate::train_and_evaluate;
pub use train_eval_spec::{EvalSpec, Exporter, TrainSpec};
pub use warm_start::WarmStartSettings;
