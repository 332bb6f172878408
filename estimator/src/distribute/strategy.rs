//! `tf.distribute.Strategy` for loops the user writes: the strategy by name with its
//! cluster, input per `InputContext`, `run` and `reduce`.

use super::{DistributedDataset, LoopCheckpointManager, LoopSummaries, PerReplica, Step, StepOutput};
use crate::{
    EstimatorError, ModelFn, Params, Result, RunConfig,
    input::{Batch, Dataset, InputContext, InputError},
    metrics::MetricState,
    session::{Replicas, compile_step},
    strategy::{Strategy, StrategyKind},
};
use engine_graph::ops::ReduceOp;
use engine_runtime::{
    Collective, Precision,
    cluster::{Cluster, ClusterFlags, TaskType, resolve_from_process_env},
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The environment variable that holds the cluster's shared secret, for every task.
pub const CLUSTER_TOKEN_ENV: &str = "ENGINE_CLUSTER_TOKEN";

/// A distribution strategy for a custom training loop. The same loop runs under every
/// strategy: `default` and `one_device` (one replica), `mirrored` and `central_storage`
/// (replicas in this process), `multi_worker` (one replica per process, synchronous) and
/// `parameter_server` (asynchronous workers, variables on ps tasks).
pub struct DistributionStrategy {
    strategy: Arc<dyn Strategy>,
    precision: Precision,
    seed: u64,
    /// The cross-process group of a step compiled under `multi_worker`: `reduce` and
    /// `metrics` combine every task's values through it.
    group: Mutex<Option<Arc<dyn Collective>>>,
}

impl DistributionStrategy {
    /// The strategy of `kind` as `engine run --strategy` builds it: `multi_worker` and
    /// `parameter_server` find their cluster in `TF_CONFIG`, torchrun's variables or Slurm's
    /// (in that order), and the cluster's secret in `ENGINE_CLUSTER_TOKEN`.
    pub fn new(kind: StrategyKind) -> Result<Self> {
        Self::with_config(kind, &RunConfig::new(""))
    }

    /// As [`new`](Self::new), with the devices, precision, seed, timeouts and
    /// cluster of `config` (its model_dir and checkpoint settings are not used: the loop
    /// saves with its own [`LoopCheckpointManager`]).
    pub fn with_config(kind: StrategyKind, config: &RunConfig) -> Result<Self> {
        let mut config = config.clone();
        let options = &mut config.strategy;
        if kind.spans_processes() {
            if options.cluster.is_none() {
                options.cluster = resolve_from_process_env(&ClusterFlags::default())
                    .map_err(|e| EstimatorError::Config(format!("the cluster: {e}")))?;
                if let Some(c) = &options.cluster {
                    log::info!("Cluster from {}: {} ({c})", c.source(), c.spec());
                }
            }
            if options.cluster_token.is_none() {
                options.cluster_token =
                    std::env::var(CLUSTER_TOKEN_ENV).ok().filter(|t| !t.is_empty()).map(crate::ClusterToken);
            }
        }
        config.train_distribute = kind;
        let strategy: Arc<dyn Strategy> = kind.build(&config.strategy)?.into();
        let seed = config.seed();
        if config.random_seed.is_none() {
            log::info!("No random_seed set; using {seed}");
        }
        if let Err(e) = crate::preemption::install() {
            log::warn!("cannot handle SIGTERM and SIGINT, so a stop loses the steps since the last checkpoint: {e}");
        }
        Ok(DistributionStrategy { strategy, precision: config.precision, seed, group: Mutex::new(None) })
    }

    pub fn kind(&self) -> StrategyKind {
        self.strategy.kind()
    }

    /// Replicas across the job: the global batch is this many per-replica batches.
    pub fn num_replicas_in_sync(&self) -> usize {
        self.strategy.num_replicas_in_sync()
    }

    /// Replicas in this process.
    pub fn local_replicas(&self) -> usize {
        self.strategy.local_devices().len()
    }

    /// Whether this task saves checkpoints and writes summaries.
    pub fn is_chief(&self) -> bool {
        self.strategy.is_chief()
    }

    pub fn cluster(&self) -> Option<&Cluster> {
        self.strategy.cluster()
    }

    /// Whether this task holds variables for the workers instead of running the loop
    /// (a `parameter_server` ps task): call [`serve_parameters`](Self::serve_parameters).
    pub fn is_parameter_server(&self) -> bool {
        self.cluster().is_some_and(|c| c.task().task_type == TaskType::Ps)
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// This process's input pipeline among the job's.
    pub fn input_context(&self) -> InputContext {
        self.strategy.input_context()
    }

    /// The strategy the loop runs under, for what the Estimator API takes.
    pub fn strategy(&self) -> &Arc<dyn Strategy> {
        &self.strategy
    }

    /// Calls `dataset_fn` with this process's [`InputContext`]: the function shards its
    /// dataset with it (`shard_by`) and batches per replica
    /// (`ctx.per_replica_batch_size(global)`), as `strategy.distribute_datasets_from_function`.
    pub fn distribute_datasets_from_function(
        &self,
        dataset_fn: impl FnOnce(&InputContext) -> std::result::Result<Dataset, InputError>,
    ) -> Result<DistributedDataset> {
        let ctx = self.input_context();
        let dataset = dataset_fn(&ctx)?;
        Ok(DistributedDataset::new(dataset, ctx, self.local_replicas()))
    }

    /// Compiles the training step `model_fn` builds (in `Mode::Train`: its loss, its
    /// `train_op`, and its `eval_metric_ops`, which every step accumulates), once, with the
    /// strategy's passes, for batches like `dataset`'s; the variables start from their
    /// initializers (restore a checkpoint with [`LoopCheckpointManager::restore_or_initialize`]).
    pub fn compile_step(&self, model_fn: &dyn ModelFn, params: &Params, dataset: &DistributedDataset) -> Result<Step> {
        if self.is_parameter_server() {
            return Err(EstimatorError::Config(
                "this is a ps task: it serves the variables (serve_parameters) instead of running steps".into(),
            ));
        }
        let compiled = compile_step(model_fn, params, &dataset.schema()?, self.strategy.as_ref())?;
        let mut replicas = Replicas::new(&compiled, self.strategy.as_ref(), self.precision)?;
        replicas.initialize(self.seed)?;
        let cross_process = self.strategy.cluster().is_some();
        if cross_process && let Some(group) = replicas.cross_process_group() {
            *self.group.lock().map_err(|_| EstimatorError::Other("the strategy's group lock is poisoned".into()))? =
                Some(group);
        }
        // Asynchronous workers reduce over their own replicas; synchronous ones over the job.
        let span = if cross_process && replicas.cross_process_group().is_none() {
            self.local_replicas()
        } else {
            self.num_replicas_in_sync()
        };
        Ok(Step::new(compiled, replicas, cross_process, self.seed, span))
    }

    /// A ps task's part of the loop: serves its share of the variables of the step the
    /// workers compile (the same `model_fn` and dataset) until every worker has called
    /// [`finish`](Self::finish). Returns the final global step if this task held it.
    pub fn serve_parameters(
        &self,
        model_fn: &dyn ModelFn,
        params: &Params,
        dataset: &DistributedDataset,
    ) -> Result<Option<u64>> {
        let compiled = compile_step(model_fn, params, &dataset.schema()?, self.strategy.as_ref())?;
        self.strategy.serve_parameters(compiled.plan.clone(), &compiled.handshake_fingerprint, self.precision)
    }

    /// Runs `step` once on every local replica, each with its batch (`strategy.run`); the
    /// collectives the strategy inserted join them with the other replicas of the job. A step
    /// whose gradients or updates are not finite changes no variable and is an error.
    pub fn run(&self, step: &mut Step, batch: PerReplica<Batch>) -> Result<PerReplica<StepOutput>> {
        if batch.len() != self.local_replicas() {
            return Err(EstimatorError::Other(format!(
                "{} batches for {} local replicas: take them from a dataset this strategy distributed",
                batch.len(),
                self.local_replicas()
            )));
        }
        step.run(batch)
    }

    /// Combines one value per replica over every replica of the job (other tasks' too, so
    /// every task must call it at the same point of the loop): their sum, or their mean.
    /// Under `parameter_server`, whose workers do not step together, over this task's.
    pub fn reduce(&self, op: ReduceOp, values: &PerReplica<f64>) -> Result<f64> {
        let mut totals = [values.values().iter().sum::<f64>(), values.len() as f64];
        if let Some(group) = self.group()? {
            group.all_reduce_f64(&mut totals, ReduceOp::Sum)?;
        }
        Ok(match op {
            ReduceOp::Sum => totals[0],
            ReduceOp::Mean => totals[0] / totals[1].max(1.0),
        })
    }

    /// The model function's metrics over every step since the last `step.reset_metrics()`,
    /// on every replica of the job (a collective, like `reduce`).
    pub fn metrics(&self, step: &Step) -> Result<BTreeMap<String, f64>> {
        let mut merged: Vec<MetricState> = step.metrics.clone();
        if let Some(group) = self.group()? {
            for state in &mut merged {
                let mut flat = state.flatten();
                group.all_reduce_f64(&mut flat, ReduceOp::Sum)?;
                *state = state.with_values(&flat);
            }
        }
        Ok(step
            .compiled
            .metrics
            .iter()
            .zip(&merged)
            .map(|((name, metric, _), s)| (name.clone(), metric.result(s)))
            .collect())
    }

    /// Ends the loop for this task: waits for every task of a `multi_worker` cluster (so
    /// none leaves while the chief still saves), or tells the ps tasks this worker is done.
    pub fn finish(&self, step: &Step) -> Result<()> {
        if self.cluster().is_some() { step.replicas.barrier() } else { Ok(()) }
    }

    /// A checkpoint manager for `directory` (a local path or `s3://bucket/prefix`) that
    /// keeps the newest `max_to_keep` (0: all) and writes only on the chief.
    pub fn checkpoint_manager(&self, directory: &str, max_to_keep: usize) -> Result<LoopCheckpointManager> {
        LoopCheckpointManager::new(directory, max_to_keep, self.is_chief())
    }

    /// TensorBoard summaries under `directory`, written by the chief (other tasks' writes
    /// are dropped, so the loop needs no branch).
    pub fn summary_writer(&self, directory: &str) -> Result<LoopSummaries> {
        LoopSummaries::new(directory, self.is_chief())
    }

    fn group(&self) -> Result<Option<Arc<dyn Collective>>> {
        Ok(self
            .group
            .lock()
            .map_err(|_| EstimatorError::Other("the strategy's group lock is poisoned".into()))?
            .clone())
    }
}
