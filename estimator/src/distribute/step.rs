//! A training step compiled once with a strategy's passes, run by `strategy.run`.

use super::PerReplica;
use crate::{
    EstimatorError, Result,
    input::Batch,
    metrics::MetricState,
    preemption,
    session::{Compiled, ReplicaLosses, Replicas, tensor_name},
};
use engine_graph::{HostTensor, Outlet, Plan, passes::strategy::STOP_REQUEST};
use engine_runtime::RunOptions;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one replica computed in a step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutput {
    /// This replica's share of the global batch's loss, as `tf.nn.compute_average_loss`
    /// makes it: the replicas' shares add up to the global batch's mean loss, so
    /// `strategy.reduce(ReduceOp::Sum, losses)` is that mean under every strategy.
    pub loss: f64,
    /// The tensors asked for with [`Step::fetch`], by name.
    pub fetched: BTreeMap<String, HostTensor>,
}

/// The per-replica losses of a step's outputs, ready for `strategy.reduce`.
impl PerReplica<StepOutput> {
    pub fn losses(&self) -> PerReplica<f64> {
        self.map(|o| o.loss)
    }
}

/// The model function's training graph after autodiff, the strategy's passes and the
/// optimizer, with its executors: every local replica's copy of the variables, the
/// collectives that join replicas (in this process or across the cluster), and the metric
/// states the steps accumulate.
pub struct Step {
    pub(crate) compiled: Compiled,
    pub(crate) replicas: Replicas,
    pub(crate) global_step: u64,
    /// Whether the replicas of a cluster started from one state (done before the first
    /// step after a start or a restore: every task reaches that point together).
    pub(crate) synced: bool,
    pub(crate) in_cluster: bool,
    pub(crate) seed: u64,
    /// Replicas whose losses `strategy.reduce` combines: the whole job, or this task's
    /// replicas when training is asynchronous (parameter_server).
    pub(crate) reduce_span: usize,
    pub(crate) metrics: Vec<MetricState>,
    fetches: Vec<(String, Outlet)>,
    stop_requested: bool,
}

impl Step {
    pub(crate) fn new(compiled: Compiled, replicas: Replicas, in_cluster: bool, seed: u64, reduce_span: usize) -> Self {
        let metrics = vec![MetricState::default(); compiled.metrics.len()];
        Step {
            compiled,
            replicas,
            global_step: 0,
            synced: !in_cluster,
            in_cluster,
            seed,
            reduce_span: reduce_span.max(1),
            metrics,
            fetches: Vec::new(),
            stop_requested: false,
        }
    }

    /// Also fetches these tensors every step, by node name (`dense_1/add`, `name:1` for a
    /// node's second output) or as `predictions/<key>` for the model function's predictions.
    pub fn fetch(mut self, names: &[&str]) -> Result<Self> {
        for name in names {
            let outlet = match self.compiled.fetch(name) {
                Some(o) => o,
                None => {
                    let (node, output) = tensor_name(name);
                    let id = self.compiled.plan.graph.find(node).map_err(|_| {
                        EstimatorError::Other(format!(
                            "the compiled step has no tensor named '{name}' (fetch predictions/<key>, loss, \
                             global_step, or a node the optimizations kept)"
                        ))
                    })?;
                    Outlet::new(id, output)
                }
            };
            self.fetches.push((name.to_string(), outlet));
        }
        Ok(self)
    }

    /// The compiled plan: what `engine plan` would print for this step.
    pub fn plan(&self) -> &Arc<Plan> {
        &self.compiled.plan
    }

    /// Steps applied so far (restored with a checkpoint).
    pub fn global_step(&self) -> u64 {
        self.global_step
    }

    /// The variables, optimizer slots included (every replica holds the same values).
    pub fn variables(&self) -> Result<BTreeMap<String, HostTensor>> {
        self.replicas.export()
    }

    /// The names of the model function's `eval_metric_ops`, accumulated by every step.
    pub fn metric_names(&self) -> Vec<String> {
        self.compiled.metrics.iter().map(|(name, _, _)| name.clone()).collect()
    }

    /// Forgets the metrics' accumulated state (Keras' `metric.reset_states()`).
    pub fn reset_metrics(&mut self) {
        self.metrics.iter_mut().for_each(|m| *m = MetricState::default());
    }

    /// Whether the last step ended with a stop asked for: SIGTERM or SIGINT received by this
    /// process, or, in a cluster, by any task (every task sees it after the same step).
    /// The loop should then save a checkpoint and return; nothing is lost.
    pub fn stop_requested(&self) -> bool {
        self.stop_requested
    }

    pub(crate) fn restored(&mut self, global_step: u64) {
        self.global_step = global_step;
        self.synced = !self.in_cluster;
    }

    /// One step on every local replica, `batches` in replica order.
    pub(crate) fn run(&mut self, batches: PerReplica<Batch>) -> Result<PerReplica<StepOutput>> {
        if !self.synced {
            self.replicas.sync_from_chief(self.global_step, self.seed)?;
            if let Some(step) = self.replicas.remote_global_step() {
                self.global_step = step;
            }
            self.synced = true;
        }
        let mut batches = batches.into_values();
        let c = &self.compiled;
        let loss = c.loss.ok_or_else(|| EstimatorError::Other("the step's graph has no loss".into()))?;
        let train_op = c.train_op.ok_or_else(|| EstimatorError::Other("the step's graph has no train op".into()))?;
        let mut fetches = vec![loss, train_op];
        for (_, _, outs) in &c.metrics {
            fetches.extend(outs);
        }
        let user_at = fetches.len();
        fetches.extend(self.fetches.iter().map(|(_, o)| *o));
        let asked = preemption::requested();
        let stop_request = c.named.get(STOP_REQUEST).copied();
        if stop_request.is_some() {
            let flag = HostTensor::scalar_f32(if asked.is_some() { 1.0 } else { 0.0 });
            batches.iter_mut().for_each(|b| {
                b.features.insert(STOP_REQUEST.into(), flag.clone());
            });
        }
        fetches.extend(stop_request);
        let options = RunOptions { step: self.global_step as i64, replica: 0, profile: false };
        let outs = self.replicas.run(batches, &fetches, options)?;
        if let Some(bad) = outs.iter().flat_map(|o| o.non_finite.first()).next() {
            return Err(EstimatorError::NonFinite {
                step: self.global_step,
                value: bad.to_string(),
                cause: if self.in_cluster {
                    "a batch of this task or another holds a NaN or infinity, or the model diverged".into()
                } else {
                    "the batch holds a NaN or infinity, or the model diverged (lower the learning rate, or clip \
                     gradients with clip_global_norm)"
                        .into()
                },
            });
        }
        self.global_step = self.replicas.remote_global_step().unwrap_or(self.global_step + 1);
        let mut per_replica = Vec::with_capacity(outs.len());
        let share = |value: f64| match c.replica_losses {
            ReplicaLosses::Scaled => value,
            ReplicaLosses::Global | ReplicaLosses::Local => value / self.reduce_span as f64,
        };
        for out in &outs {
            let value = out.fetched[0].to_host()?.scalar_value().unwrap_or(f64::NAN);
            let mut at = 2;
            for (state, (_, _, incs)) in self.metrics.iter_mut().zip(&c.metrics) {
                let values =
                    out.fetched[at..at + incs.len()].iter().map(|v| v.to_host()).collect::<Result<Vec<_>, _>>()?;
                state.add(&values);
                at += incs.len();
            }
            let mut fetched = BTreeMap::new();
            for ((name, _), value) in self.fetches.iter().zip(&out.fetched[user_at..]) {
                fetched.insert(name.clone(), value.to_host()?);
            }
            per_replica.push(StepOutput { loss: share(value), fetched });
        }
        self.stop_requested = match stop_request {
            Some(_) => {
                let flag = outs.first().and_then(|o| o.fetched.last()).map(|v| v.to_host()).transpose()?;
                flag.and_then(|t| t.scalar_value()).unwrap_or(0.0) > 0.0
            }
            None => asked.is_some(),
        } || self.replicas.stopping();
        Ok(PerReplica(per_replica))
    }
}
