//! From a model function to a plan: placeholders from the dataset's schema, the model's
//! nodes, metrics, then the pass pipeline (autodiff, the strategy's passes, optimizer,
//! common-subexpression and dead-code elimination).

use crate::{
    EstimatorError, Mode, ModelFn, Params, Result, TrainOp,
    estimator_spec::EstimatorSpec,
    hooks::SessionRunHook,
    input::Schema,
    metrics::Metric,
    strategy::{Stage, Strategy},
};
use engine_graph::{
    Graph, GraphBuilder, Op, Outlet, Plan, Shape,
    autodiff::Autodiff,
    ops::ReduceOp,
    optimizer::{ApplyOptimizer, OptimizerConfig},
    passes::{CheckNumericsPass, FuseAttention, FuseNormalization, Fusions, PassManager, optimization_passes_with},
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The feed name of the labels placeholder.
pub(crate) const LABELS: &str = "labels";

pub(crate) struct Compiled {
    pub plan: Arc<Plan>,
    pub loss: Option<Outlet>,
    pub train_op: Option<Outlet>,
    pub predictions: BTreeMap<String, Outlet>,
    /// `(name, metric, state increments)`.
    pub metrics: Vec<(String, Metric, Vec<Outlet>)>,
    /// Tensors hooks may fetch by name.
    pub named: BTreeMap<String, Outlet>,
    pub spec_hooks: Vec<Box<dyn SessionRunHook>>,
    pub spec_chief_hooks: Vec<Box<dyn SessionRunHook>>,
    /// The model and the strategy's layout: what checkpoints record and compare.
    pub fingerprint: String,
    /// The model and the whole strategy, the cluster's addresses included: what tasks of one
    /// job compare in their handshake.
    pub handshake_fingerprint: String,
    /// How the losses the local replicas fetch make the loss of the global batch.
    pub replica_losses: ReplicaLosses,
}

impl Compiled {
    /// What its steps are, for a log line.
    pub fn purpose(&self) -> &'static str {
        match (self.train_op, self.loss) {
            (Some(_), _) => "training steps",
            (None, Some(_)) => "evaluation steps",
            (None, None) => "prediction steps",
        }
    }
}

/// How the losses the local replicas fetch make the mean over the global batch (what the
/// loop logs, hooks see and `train` returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplicaLosses {
    /// Each is that mean already, all-reduced in the graph (in one process or across
    /// many): any one of them.
    Global,
    /// Each was divided by the replicas in sync, all of them local: their sum.
    Scaled,
    /// Each is the mean over an equal per-replica batch: their mean.
    Local,
}

impl ReplicaLosses {
    /// Reads the compiled graph: is its loss an all-reduce, was it scaled?
    fn of(g: &Graph, loss_scaled: bool, replicas_in_sync: usize) -> Result<Self> {
        let reduce = g.roles.loss.and_then(|o| match &g.node(o.node).op {
            Op::AllReduce(a) => Some(a.reduce),
            _ => None,
        });
        match reduce {
            None if loss_scaled => Ok(ReplicaLosses::Scaled),
            None => Ok(ReplicaLosses::Local),
            // A sum of losses divided by the replica count, or a mean of undivided ones.
            Some(ReduceOp::Sum) if loss_scaled || replicas_in_sync <= 1 => Ok(ReplicaLosses::Global),
            Some(ReduceOp::Mean) if !loss_scaled => Ok(ReplicaLosses::Global),
            Some(op) => Err(EstimatorError::Other(format!(
                "the loss is all-reduced with {op} over {replicas_in_sync} replicas but {}scaled: it would not be the global batch's",
                if loss_scaled { "" } else { "not " }
            ))),
        }
    }

    /// The global batch's loss from the local replicas' fetched ones.
    pub fn combine(self, losses: &[f64]) -> f64 {
        match self {
            ReplicaLosses::Global => losses.first().copied().unwrap_or(f64::NAN),
            ReplicaLosses::Scaled => losses.iter().sum(),
            ReplicaLosses::Local => losses.iter().sum::<f64>() / losses.len() as f64,
        }
    }
}

impl Compiled {
    pub fn fetch(&self, name: &str) -> Option<Outlet> {
        match name {
            "loss" => self.loss,
            _ => self.named.get(name).copied(),
        }
    }
}

pub(crate) fn compile(
    model_fn: &dyn ModelFn,
    params: &Params,
    mode: Mode,
    schema: &Schema,
    strategy: &dyn Strategy,
    extra_tensors: &[String],
) -> Result<Compiled> {
    compile_with(model_fn, params, mode, schema, strategy, extra_tensors, mode == Mode::Eval)
}

/// A custom loop's training step: the training graph plus the model function's metrics,
/// whose increments every step fetches (the Estimator computes metrics when evaluating).
pub(crate) fn compile_step(
    model_fn: &dyn ModelFn,
    params: &Params,
    schema: &Schema,
    strategy: &dyn Strategy,
) -> Result<Compiled> {
    compile_with(model_fn, params, Mode::Train, schema, strategy, &[], true)
}

fn compile_with(
    model_fn: &dyn ModelFn,
    params: &Params,
    mode: Mode,
    schema: &Schema,
    strategy: &dyn Strategy,
    extra_tensors: &[String],
    with_metrics: bool,
) -> Result<Compiled> {
    let mut graph = Graph::new();
    let mut spec = build_model(&mut graph, model_fn, params, mode, schema, &[])?;
    let mut b = GraphBuilder::new(&mut graph);
    let mut metrics = Vec::new();
    if with_metrics {
        for (name, metric) in &spec.eval_metric_ops {
            let outs = metric.build(name, &mut b)?;
            metrics.push((name.clone(), metric.clone(), outs));
        }
    }
    for (name, _, outs) in &metrics {
        for (i, o) in outs.iter().enumerate() {
            graph.roles.fetches.insert(format!("metrics/{name}/{i}"), *o);
        }
    }
    for name in extra_tensors {
        let (node, output) = tensor_name(name);
        let id = graph.find(node)?;
        graph.roles.fetches.insert(name.clone(), Outlet::new(id, output));
    }
    let optimizer = match (mode, spec.train_op.clone()) {
        (Mode::Train, Some(TrainOp::Minimize(optimizer))) => Some(optimizer),
        (Mode::Train, None) => return Err(EstimatorError::Spec { mode, reason: "training needs a train_op".into() }),
        _ => None,
    };
    // An elastic job's tasks compile for the membership they are in, and the strategy's
    // passes bake its replica count in (the loss scale): the job's identity, which a task
    // that joins later must match before it knows that count, is the graph through the same
    // pipeline without them.
    let identity = match strategy.elastic_rules() {
        Some(_) => {
            let mut bare = graph.clone();
            run_passes_with(&mut bare, optimizer.clone(), &|_, _| Vec::new())?;
            Some(bare.fingerprint()?)
        }
        None => None,
    };
    let passes = run_passes(&mut graph, optimizer, strategy)?;
    let mut named: BTreeMap<String, Outlet> = graph.roles.fetches.clone();
    if let Ok(step) = graph.find("global_step") {
        named.insert("global_step".into(), Outlet::from(step));
    }
    for (k, v) in &graph.roles.predictions {
        named.entry(format!("predictions/{k}")).or_insert(*v);
    }
    let graph_fingerprint = graph.fingerprint()?;
    let fingerprint = format!("{graph_fingerprint}-{}", engine_graph::derive_seed(0, &strategy.layout()) & 0xffff);
    let handshake_fingerprint = format!(
        "{}-{}",
        identity.as_deref().unwrap_or(&graph_fingerprint),
        engine_graph::derive_seed(0, &strategy.describe()) & 0xffff
    );
    let loss_scaled = passes.iter().any(|(name, changed)| name == "scale-loss" && *changed);
    let replica_losses = ReplicaLosses::of(&graph, loss_scaled, strategy.num_replicas_in_sync())?;
    let plan = Arc::new(Plan::new(graph, passes)?);
    let g = &plan.graph;
    Ok(Compiled {
        loss: g.roles.loss,
        train_op: g.roles.train_op,
        predictions: g.roles.predictions.clone(),
        metrics: metrics
            .into_iter()
            .map(|(n, m, outs)| {
                let outs =
                    (0..outs.len()).filter_map(|i| g.roles.fetches.get(&format!("metrics/{n}/{i}")).copied()).collect();
                (n, m, outs)
            })
            .collect(),
        named,
        spec_hooks: std::mem::take(match mode {
            Mode::Train => &mut spec.training_hooks,
            Mode::Eval => &mut spec.evaluation_hooks,
            Mode::Predict => &mut spec.prediction_hooks,
        }),
        spec_chief_hooks: std::mem::take(&mut spec.training_chief_hooks),
        fingerprint,
        handshake_fingerprint,
        replica_losses,
        plan: plan.clone(),
    })
}

/// A tensor's node and output from its name: `dense/add` is output 0, `split:1` output 1.
pub(crate) fn tensor_name(name: &str) -> (&str, usize) {
    match name.rsplit_once(':').map(|(n, o)| (n, o.parse::<usize>())) {
        Some((node, Ok(output))) => (node, output),
        _ => (name, 0),
    }
}

/// The model's nodes for a mode, before any pass: placeholders from the schema, the model
/// function, and the roles (inputs, loss, predictions). What an export stores as the graph
/// to recompile wherever it is loaded.
pub(crate) fn build_model(
    graph: &mut Graph,
    model_fn: &dyn ModelFn,
    params: &Params,
    mode: Mode,
    schema: &Schema,
    preprocessing: &[crate::input::Map],
) -> Result<EstimatorSpec> {
    let mut b = GraphBuilder::new(graph);
    let mut inputs = BTreeMap::new();
    for f in &schema.features {
        let p = b.placeholder(&f.name, f.dtype, Shape::batched(&f.shape))?;
        inputs.insert(f.name.clone(), p);
    }
    let features = match preprocessing.is_empty() {
        true => inputs.clone(),
        false => b.with_scope("preprocessing", |b| crate::export::preprocess(b, &inputs, schema, preprocessing))?,
    };
    let labels = match (&schema.label, mode) {
        (Some(l), Mode::Train | Mode::Eval) => Some(b.placeholder(LABELS, l.dtype, Shape::batched(&l.shape))?),
        _ => None,
    };
    let spec: EstimatorSpec = model_fn.build(&features, labels, mode, params, &mut b)?;
    spec.validate(mode, b.graph())?;
    graph.roles.inputs = inputs;
    if let Some(l) = labels {
        graph.roles.inputs.insert(LABELS.into(), l);
    }
    graph.roles.loss = spec.loss;
    graph.roles.predictions = spec.predictions.clone();
    Ok(spec)
}

/// The pass pipeline every graph goes through, in one place: the normalization and attention fusions;
/// for training (`optimizer` given) the strategy's pre-gradient passes, autodiff, its gradient passes, the optimizer;
/// for every mode its placement passes and the optimizations. Returns the pass log.
pub(crate) fn run_passes(
    graph: &mut Graph,
    optimizer: Option<OptimizerConfig>,
    strategy: &dyn Strategy,
) -> Result<Vec<(String, bool)>> {
    run_passes_with(graph, optimizer, &|stage, training| strategy.passes(stage, training))
}

/// The pipeline, with what `strategy` gives at each stage a strategy takes part in.
fn run_passes_with(
    graph: &mut Graph,
    optimizer: Option<OptimizerConfig>,
    strategy: &dyn Fn(Stage, bool) -> Vec<Box<dyn engine_graph::passes::Pass>>,
) -> Result<Vec<(String, bool)>> {
    let mut passes = PassManager::new();
    let training = optimizer.is_some();
    // Before autodiff, so that the fused normalization's and attention's gradients are
    // the fused ones.
    passes.push(Box::new(FuseNormalization));
    passes.push(Box::new(FuseAttention));
    if let Some(config) = optimizer {
        strategy(Stage::BeforeGradients, true).into_iter().for_each(|p| passes.push(p));
        passes.push(Box::new(Autodiff));
        strategy(Stage::Gradients, true).into_iter().for_each(|p| passes.push(p));
        passes.push(Box::new(ApplyOptimizer { config }));
        passes.push(Box::new(CheckNumericsPass));
    }
    strategy(Stage::AfterOptimizer, training).into_iter().for_each(|p| passes.push(p));
    for p in optimization_passes_with(fusions_from_env()) {
        passes.push(p);
    }
    passes.run(graph)?;
    Ok(passes.log().to_vec())
}

/// The optional fusions a benchmark turns on: `ENGINE_FUSE_INPUT_GRAD=1` adds
/// `fuse-relu-grad-into-input-grad`, `ENGINE_FUSE_BN_RELU=1` `fuse-relu-into-normalization`
/// (levers for measuring them on another core kind with one binary, as
/// `ENGINE_CPU_GEMM=packed` is for the packed GEMM).
fn fusions_from_env() -> Fusions {
    let on = |name: &str| std::env::var(name).is_ok_and(|v| v.trim() == "1");
    Fusions {
        relu_grad_into_input_grad: on("ENGINE_FUSE_INPUT_GRAD"),
        relu_into_normalization: on("ENGINE_FUSE_BN_RELU"),
    }
}

/// The plan `train`, `evaluate` or `predict` compiles for `mode` (placeholders from
/// `input_fn`'s schema under `strategy`'s input context, the same pass pipeline), for
/// showing it: `engine plan` prints what training runs, not a lookalike.
pub fn plan_for(
    model_fn: &dyn ModelFn,
    params: &Params,
    mode: Mode,
    input_fn: &dyn crate::InputFn,
    strategy: &dyn Strategy,
) -> Result<Arc<Plan>> {
    let schema = input_fn.dataset(mode, &strategy.input_context())?.schema()?;
    Ok(compile(model_fn, params, mode, &schema, strategy, &[])?.plan)
}

/// Compiles a graph whose model is already built (with its roles set) into a plan with a
/// strategy: what `engine plan` prints is exactly what training runs.
pub fn compile_plan(mut graph: Graph, optimizer: Option<OptimizerConfig>, strategy: &dyn Strategy) -> Result<Plan> {
    let log = run_passes(&mut graph, optimizer, strategy)?;
    Ok(Plan::new(graph, log)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_graph::{DType, GraphError};

    /// A graph whose loss is a mean, optionally all-reduced with `reduce`.
    fn graph(reduce: Option<ReduceOp>) -> std::result::Result<Graph, GraphError> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let mut loss = b.reduce_mean(x, &[], false)?;
        if let Some(op) = reduce {
            loss = b.all_reduce(&[loss], op, 0)?[0];
        }
        g.roles.loss = Some(loss);
        Ok(g)
    }

    #[test]
    fn a_summed_scaled_loss_is_global_and_taken_once() -> Result<()> {
        let g = graph(Some(ReduceOp::Sum))?;
        let how = ReplicaLosses::of(&g, true, 4)?;
        assert_eq!(how, ReplicaLosses::Global);
        // Every local replica fetched the same global value: not summed again.
        assert_eq!(how.combine(&[0.5, 0.5]), 0.5);
        // One replica in sync needs no scaling; a mean of unscaled losses is global too.
        assert_eq!(ReplicaLosses::of(&g, false, 1)?, ReplicaLosses::Global);
        assert_eq!(ReplicaLosses::of(&graph(Some(ReduceOp::Mean))?, false, 4)?, ReplicaLosses::Global);
        Ok(())
    }

    #[test]
    fn local_losses_are_summed_when_scaled_and_averaged_when_not() -> Result<()> {
        let g = graph(None)?;
        assert_eq!(ReplicaLosses::of(&g, true, 2)?.combine(&[0.25, 0.5]), 0.75);
        assert_eq!(ReplicaLosses::of(&g, false, 1)?.combine(&[0.25, 0.5]), 0.375);
        Ok(())
    }

    #[test]
    fn tensor_names_split_into_node_and_output() {
        assert_eq!(tensor_name("dense/add"), ("dense/add", 0));
        assert_eq!(tensor_name("split:1"), ("split", 1));
        assert_eq!(tensor_name("scope:name"), ("scope:name", 0));
    }

    #[test]
    fn a_sum_of_unscaled_losses_is_refused() -> Result<()> {
        let err =
            ReplicaLosses::of(&graph(Some(ReduceOp::Sum))?, false, 2).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("not scaled"), "{err}");
        Ok(())
    }
}
