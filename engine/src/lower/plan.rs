//! From a spec to a scheduled plan, through the estimator's pass pipeline and strategy
//! kinds, so the plan printed is the plan trained.

use super::{LowerError, Mode, build_model};
use crate::spec::{Spec, StrategyKind};
use engine_estimator::compile_plan;
use engine_graph::{Graph, GraphBuilder, Plan};

/// The plan for one mode with a strategy (replica devices by default: one per core), from
/// the spec alone: the model on placeholders of the spec's shapes. `engine plan` compiles
/// through the estimator instead (`engine_estimator::plan_for`), on the input's own.
pub fn compile(spec: &Spec, mode: Mode, strategy: StrategyKind) -> Result<Plan, LowerError> {
    let config = spec.job.run_config.to_estimator();
    let strategy = strategy.build(&config.strategy).map_err(|e| LowerError::Strategy(e.to_string()))?;
    let mut graph = Graph::new();
    build_model(spec, mode, &mut GraphBuilder::new(&mut graph), config.seed())?;
    let optimizer = (mode == Mode::Train).then(|| crate::job::optimizer_config(spec));
    compile_plan(graph, optimizer, strategy.as_ref()).map_err(|e| LowerError::Strategy(e.to_string()))
}

pub fn training_plan(spec: &Spec, strategy: StrategyKind) -> Result<Plan, LowerError> {
    compile(spec, Mode::Train, strategy)
}

pub fn eval_plan(spec: &Spec, strategy: StrategyKind) -> Result<Plan, LowerError> {
    compile(spec, Mode::Eval, strategy)
}

pub fn predict_plan(spec: &Spec, strategy: StrategyKind) -> Result<Plan, LowerError> {
    compile(spec, Mode::Predict, strategy)
}
