//! `engine plan`: compile a spec and print (or draw) the plan.

use super::{CliError, PlanArgs};
use crate::{
    lower::{self, Mode},
    spec::{Spec, StrategyKind, input_batch_size},
};
use engine_graph::{Op, Placement, Plan, passes::strategy::transfer_bytes};
use engine_runtime::cluster::{
    Cluster, ClusterFlags, ClusterSource, ClusterSpec, TaskId, TaskType, resolve_from_process_env,
};
use std::fmt::Write;

/// When neither `--batch` nor the input section gives a batch size.
const FALLBACK_BATCH: usize = 32;

pub fn plan(args: &PlanArgs) -> Result<(), CliError> {
    let spec = args.common.load(Vec::new())?;
    let summary = lower::summary(&spec)?;
    if args.summary {
        super::output(&summary.to_string());
        return Ok(());
    }
    // A dry run of `engine run`: the input sections are opened and checked as training
    // would, so a missing file or an impossible size fails here, at its line.
    let train = crate::job::train_input_fn(&spec)?;
    crate::job::check_model_inputs(&spec, &train, Mode::Train)?;
    let eval = crate::job::eval_input_fn(&spec)?;
    if let Some(eval) = &eval {
        crate::job::check_model_inputs(&spec, eval, Mode::Eval)?;
    }
    // The plan is compiled as the estimator compiles it: one settings chain to one seed
    // and strategy, the model function on the input's placeholders.
    let mut config = args.common.run_config(&spec, &args.devices);
    let strategy = config.strategy_for(args.mode);
    if let (Some(n), false) = (args.ps, strategy == StrategyKind::ParameterServer) {
        return Err(CliError::Usage(format!(
            "--ps {n} places variables on ps tasks, which only parameter_server has (this plan is {strategy}): add \
             --strategy parameter_server"
        )));
    }
    config.strategy.cluster = planning_cluster(strategy, args.ps.unwrap_or(1))?;
    let built = strategy.build(&config.strategy).map_err(|e| lower::LowerError::Strategy(e.to_string()))?;
    let input = match (args.mode, &eval) {
        (Mode::Eval | Mode::Predict, Some(eval)) => eval.as_ref(),
        _ => train.as_ref(),
    };
    let model_fn = crate::job::SpecModelFn::new(std::sync::Arc::new(spec.clone()), config.seed());
    let plan = engine_estimator::plan_for(&model_fn, &engine_estimator::Params::Null, args.mode, input, built.as_ref())
        .map_err(|e| lower::LowerError::Strategy(e.to_string()))?;
    if args.dot.as_deref().is_some_and(|p| p.as_os_str() == "-") {
        super::output(&plan.graph.to_dot());
        return Ok(());
    }
    let batch = args.batch.unwrap_or_else(|| default_batch(&spec, args.mode));
    let local = built.local_devices();
    let replicas = local.len().max(1);
    engine_estimator::check_model_memory(&plan, batch, replicas, &engine_estimator::Resources::of_this_machine())?;
    let mut out = String::new();
    let _ = writeln!(out, "spec: {}", spec.file());
    let _ = writeln!(out, "mode: {}  strategy: {strategy}  batch: {batch}", args.mode.name());
    // The digest checkpoints record (before their `-`): which plan trained a checkpoint.
    let fingerprint = plan.graph.fingerprint().map_err(|e| CliError::Usage(e.to_string()))?;
    let _ = writeln!(out, "graph fingerprint: {fingerprint}");
    if let Some(line) = precision_line(&plan, config.precision) {
        let _ = writeln!(out, "{line}");
    }
    if local.iter().any(|d| d.kind() == engine_runtime::DeviceKind::Cpu) {
        let _ = writeln!(out, "cpu: {}", engine_runtime::HostCpu::get());
        let threads = engine_runtime::ComputeThreads::get();
        let _ = writeln!(out, "compute threads: {threads}");
    }
    if let Some(line) = partition_devices(&plan, &local) {
        let _ = writeln!(out, "{line}");
    }
    out.push_str(&summary.to_string());
    out.push_str(&variables(&plan));
    out.push_str(&ps_traffic(&plan, batch)?);
    out.push_str(&plan.describe(batch));
    if let Some(path) = &args.dot {
        std::fs::write(path, plan.graph.to_dot())
            .map_err(|source| CliError::Write { path: path.display().to_string(), source })?;
        let _ = writeln!(out, "graph written to {}", path.display());
    }
    super::output(&out);
    Ok(())
}

/// Which ops a mixed precision computes in bfloat16: `None` where every op computes in the
/// precision's one dtype.
fn precision_line(plan: &Plan, precision: engine_runtime::Precision) -> Option<String> {
    let narrowed: Vec<&Op> =
        plan.schedule.iter().map(|&id| &plan.graph.node(id).op).filter(|op| precision.narrows(op)).collect();
    if narrowed.is_empty() {
        return None;
    }
    let kinds: std::collections::BTreeSet<&str> = narrowed.iter().map(|op| op.name()).collect();
    Some(format!(
        "precision: {precision:?}: {} of {} ops multiply in bfloat16 ({}); variables, optimizer slots, the loss and \
         every other op in f32",
        narrowed.len(),
        plan.schedule.len(),
        kinds.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

/// Which devices the plan's partition labels stand for (`@host`, `@replica`, `@worker`):
/// a strategy that splits the graph names partitions, and the session gives each a device.
/// `None` where every node already names its device.
fn partition_devices(plan: &Plan, local: &[engine_runtime::Device]) -> Option<String> {
    let labels: std::collections::BTreeSet<Placement> = plan.graph.nodes().filter_map(|(_, n)| n.placement).collect();
    let replicas = || local.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    let mut parts = Vec::new();
    if labels.contains(&Placement::Host) {
        parts.push(format!("{} = cpu:0 (variables and their updates)", Placement::Host));
    }
    if labels.contains(&Placement::Replica) {
        parts.push(format!("{} = {} (one copy per replica)", Placement::Replica, replicas()));
    }
    if labels.contains(&Placement::Worker) {
        parts.push(format!("{} = {} (each worker's own)", Placement::Worker, replicas()));
    }
    (!parts.is_empty()).then(|| format!("devices: {}", parts.join("; ")))
}

/// The cluster a `parameter_server` plan is placed for: the process's own (from `TF_CONFIG`,
/// torchrun or Slurm) when it has one, else a chief and `ps` ps tasks. Only the ps count
/// matters.
fn planning_cluster(strategy: StrategyKind, ps: u16) -> Result<Option<Cluster>, CliError> {
    if strategy != StrategyKind::ParameterServer {
        return Ok(None);
    }
    if let Some(cluster) = resolve_from_process_env(&ClusterFlags::default())? {
        return Ok(Some(cluster));
    }
    let spec = ClusterSpec {
        chief: vec!["127.0.0.1:1".into()],
        ps: (0..ps).map(|k| format!("127.0.0.1:{}", 2 + k)).collect(),
        ..ClusterSpec::default()
    };
    Ok(Some(Cluster::new(spec, TaskId::new(TaskType::Chief, 0), ClusterSource::Flags, None)?))
}

/// What a parameter-server step moves: each ps task's variables, and the bytes a training
/// task reads from and sends to the ps tasks per step.
fn ps_traffic(plan: &Plan, batch: usize) -> Result<String, CliError> {
    let g = &plan.graph;
    if !g.nodes().any(|(_, n)| n.placement == Some(Placement::Worker)) {
        return Ok(String::new());
    }
    let mut s = String::new();
    let mut per_ps: std::collections::BTreeMap<Option<Placement>, (usize, usize)> = Default::default();
    for id in g.variables() {
        let n = g.node(id);
        let bytes = n.outputs.first().map(|f| f.bytes(batch)).unwrap_or(0);
        let e = per_ps.entry(n.placement).or_default();
        e.0 += 1;
        e.1 += bytes;
    }
    for (ps, (count, bytes)) in &per_ps {
        let ps = ps.map(|p| p.to_string()).unwrap_or_default();
        let _ = writeln!(s, "{ps}: {count} variables, {}", human_bytes(*bytes));
    }
    let (read, sent) = transfer_bytes(g, batch).map_err(|e| CliError::Usage(e.to_string()))?;
    let _ = writeln!(
        s,
        "per step, each training task reads {} from the ps tasks and sends them {}",
        human_bytes(read),
        human_bytes(sent)
    );
    Ok(s)
}

fn human_bytes(b: usize) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
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
            let place = match node.placement {
                Some(ps @ Placement::Ps(_)) => format!(" @{ps}"),
                _ => String::new(),
            };
            let _ = writeln!(s, "  {:<48} {:<22} {:<10} {:?}{place}", node.name, shape, kind, v.init);
        }
    }
    s
}
