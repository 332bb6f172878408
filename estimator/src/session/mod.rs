//! Compiled graphs per mode, the replicas that run them, and the loops that drive them.

mod ahead;
mod compile;
mod eval_hooks;
mod evaluation;
mod example_log;
mod memory;
mod prediction;
mod remote;
mod replicas;
mod training;

pub use ahead::PIPELINE_ENV;
pub(crate) use compile::{Compiled, ReplicaLosses, build_model, compile, compile_step, tensor_name};
pub use compile::{compile_plan, plan_for};
pub(crate) use eval_hooks::EvalHooks;
pub(crate) use evaluation::{EvalObserver, EvalOutcome, evaluate_dataset};
pub use example_log::EXAMPLE_LOG_ENV;
pub(crate) use example_log::ExampleLog;
pub use memory::check_model_memory;
pub use prediction::Predictions;
pub(crate) use replicas::Replicas;
pub use training::TrainOutcome;
pub(crate) use training::TrainingSession;
