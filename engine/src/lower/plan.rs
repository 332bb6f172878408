//! From a spec to a scheduled plan, through the estimator's pass pipeline and strategy
//! registry, so the plan printed is the plan trained.

use super::{LowerError, Mode, build_model};
use crate::spec::{Spec, Strategy};
use engine_estimator::{
    compile_plan,
    strategy::{StrategyOptions, strategy_by_name},
};
use engine_graph::{Graph, GraphBuilder, Plan};

/// The plan for one mode with a strategy (replica devices by default: one per core).
pub fn compile(spec: &Spec, mode: Mode, strategy: Strategy) -> Result<Plan, LowerError> {
    compile_with(spec, mode, strategy, &StrategyOptions::default())
}

pub fn compile_with(
    spec: &Spec,
    mode: Mode,
    strategy: Strategy,
    options: &StrategyOptions,
) -> Result<Plan, LowerError> {
    let strategy = strategy_by_name(strategy.name(), options).map_err(|e| LowerError::Strategy(e.to_string()))?;
    let mut graph = Graph::new();
    build_model(spec, mode, &mut GraphBuilder::new(&mut graph), spec.job.run_config.seed())?;
    let optimizer = (mode == Mode::Train).then(|| spec.job.optimizer.to_config());
    compile_plan(graph, optimizer, strategy.as_ref()).map_err(|e| LowerError::Strategy(e.to_string()))
}

pub fn training_plan(spec: &Spec, strategy: Strategy) -> Result<Plan, LowerError> {
    compile(spec, Mode::Train, strategy)
}

pub fn eval_plan(spec: &Spec, strategy: Strategy) -> Result<Plan, LowerError> {
    compile(spec, Mode::Eval, strategy)
}

pub fn predict_plan(spec: &Spec, strategy: Strategy) -> Result<Plan, LowerError> {
    compile(spec, Mode::Predict, strategy)
}
