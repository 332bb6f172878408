//! `engine plan`: compile a spec and print (or draw) the plan.

use super::{CliError, PlanArgs};
use crate::{
    lower::{self, Mode},
    spec::{Spec, input_batch_size},
};
use engine_estimator::strategy::StrategyOptions;
use engine_graph::{Op, Plan};
use std::fmt::Write;

/// When neither `--batch` nor the input section gives a batch size.
const FALLBACK_BATCH: usize = 32;

pub fn plan(args: &PlanArgs) -> Result<(), CliError> {
    let spec = args.common.load(Vec::new())?;
    // A dry run of `engine run`: the input sections are opened and checked as training
    // would, so a missing file or an impossible size fails here, at its line.
    let train = crate::job::train_input_fn(&spec)?;
    crate::job::check_model_inputs(&spec, &train, Mode::Train)?;
    if let Some(eval) = crate::job::eval_input_fn(&spec)? {
        crate::job::check_model_inputs(&spec, &eval, Mode::Eval)?;
    }
    let strategy = args.common.strategy(&spec, args.mode);
    let options = StrategyOptions {
        device: args.device.to_string(),
        devices: (!args.devices.is_empty()).then(|| args.devices.clone()),
        ..StrategyOptions::default()
    };
    let plan = lower::compile_with(&spec, args.mode, strategy, &options)?;
    if args.dot.as_deref().is_some_and(|p| p.as_os_str() == "-") {
        super::output(&plan.graph.to_dot());
        return Ok(());
    }
    let batch = args.batch.unwrap_or_else(|| default_batch(&spec, args.mode));
    let replicas = engine_estimator::strategy::strategy_by_name(strategy.name(), &options)
        .map(|s| s.local_devices().len())
        .unwrap_or(1);
    engine_estimator::check_model_memory(&plan, batch, replicas, &engine_estimator::Resources::of_this_machine())?;
    let mut out = String::new();
    let _ = writeln!(out, "spec: {}", spec.file());
    let _ = writeln!(out, "mode: {}  strategy: {strategy}  batch: {batch}", args.mode);
    out.push_str(&variables(&plan));
    out.push_str(&plan.describe(batch));
    if let Some(path) = &args.dot {
        std::fs::write(path, plan.graph.to_dot())
            .map_err(|source| CliError::Write { path: path.display().to_string(), source })?;
        let _ = writeln!(out, "graph written to {}", path.display());
    }
    super::output(&out);
    Ok(())
}

fn default_batch(spec: &Spec, mode: Mode) -> usize {
    let job = &spec.job;
    let input = match mode {
        Mode::Train => Some(&job.train_input),
        Mode::Eval | Mode::Predict => job.eval_input.as_ref().or(Some(&job.train_input)),
    };
    input.and_then(|i| input_batch_size(spec, i)).unwrap_or(FALLBACK_BATCH).clamp(1, super::MAX_PLAN_BATCH)
}

fn variables(plan: &Plan) -> String {
    let mut s = String::new();
    let vars = plan.graph.variables();
    let _ = writeln!(s, "variables ({}):", vars.len());
    for id in vars {
        let node = plan.graph.node(id);
        if let Op::Variable(v) = &node.op {
            let kind = if v.trainable { "trainable" } else { "" };
            let shape = node.outputs.first().map(|f| f.to_string()).unwrap_or_default();
            let _ = writeln!(s, "  {:<48} {:<22} {:<10} {:?}", node.name, shape, kind, v.init);
        }
    }
    s
}
