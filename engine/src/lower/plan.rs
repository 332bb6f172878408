//! From a spec to a scheduled plan: build, differentiate, apply the optimizer, optimize.

use super::{LowerError, Mode, build_model};
use crate::spec::{Spec, Strategy};
use engine_graph::{
    Graph, GraphBuilder, Plan,
    autodiff::Autodiff,
    optimizer::ApplyOptimizer,
    passes::{PassManager, optimization_passes},
};

/// The plan for one mode. Training graphs get `autodiff` and `apply-optimizer`; every
/// graph then gets the strategy's passes, common-subexpression and dead-code elimination.
pub fn compile(spec: &Spec, mode: Mode, strategy: Strategy) -> Result<Plan, LowerError> {
    let strategy_passes = strategy_passes(strategy)?;
    let mut graph = Graph::new();
    build_model(spec, mode, &mut GraphBuilder::new(&mut graph), spec.job.run_config.seed())?;
    let mut passes = PassManager::new();
    if mode == Mode::Train {
        passes = passes.with(Autodiff).with(ApplyOptimizer { config: spec.job.optimizer.to_config() });
    }
    for p in strategy_passes {
        passes.push(p);
    }
    for p in optimization_passes() {
        passes.push(p);
    }
    passes.run(&mut graph).map_err(|source| LowerError::Graph { stage: "compiling the graph", source })?;
    Plan::new(graph, passes.log().to_vec()).map_err(|source| LowerError::Graph { stage: "scheduling", source })
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

/// The rewrites a strategy adds. The distributed strategies' passes (replication,
/// collectives, placement) are not written yet.
fn strategy_passes(strategy: Strategy) -> Result<Vec<Box<dyn engine_graph::passes::Pass>>, LowerError> {
    match strategy {
        Strategy::Default | Strategy::OneDevice => Ok(Vec::new()),
        other => Err(LowerError::StrategyNotImplemented(other)),
    }
}
