//! `parameter_server`: TensorFlow's ParameterServerStrategy as Estimator ran it, with a
//! cluster of chief, workers and ps tasks (and optionally an evaluator). Variables and
//! their updates are placed on the ps tasks by a pass; each chief or worker task trains
//! one replica on its own input shard, reading the variables and sending its gradients
//! every step, and the ps tasks apply each worker's update as it arrives (asynchronous
//! training: no worker waits for another, and a dead worker stops nobody).
//!
//! The ps connections are made lazily, when the first training graph is compiled: the
//! handshake compares the graph's fingerprint, so a task started with another spec is
//! refused before any step runs.

use super::{Stage, Strategy, StrategyOptions};
use crate::{EstimatorError, Result, input::InputContext};
use engine_graph::Plan;
use engine_graph::passes::{
    Pass,
    strategy::{ParameterServerPlacement, PartitionVariables, Partitioner},
};
use engine_runtime::{
    Device, Precision,
    cluster::{Cluster, TaskType},
    transport::ps::{ClientConfig, ParameterClients, ParameterShard, ServeConfig, serve},
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct ParameterServerStrategy {
    cluster: Cluster,
    device: Device,
    call_timeout: Duration,
    connect_timeout: Duration,
    token: Option<String>,
    partitioner: Option<Partitioner>,
    /// The connections and the fingerprint they were made for.
    clients: Mutex<Option<(String, Arc<ParameterClients>)>>,
}

impl ParameterServerStrategy {
    pub fn new(options: &StrategyOptions) -> Result<Self> {
        let cluster = options.cluster.clone().ok_or_else(|| {
            EstimatorError::Config(
                "strategy 'parameter_server' needs a cluster with ps tasks: set TF_CONFIG or pass --cluster and --task \
                 (torchrun and Slurm make every task a worker), or start a local one with `engine launch --ps 1 \
                 --workers 2`"
                    .into(),
            )
        })?;
        if cluster.spec().tasks(TaskType::Ps).is_empty() {
            return Err(EstimatorError::Config(format!(
                "strategy 'parameter_server' needs at least one ps task, and cluster {} has none",
                cluster.spec()
            )));
        }
        if cluster.spec().collective_group_size() == 0 {
            return Err(EstimatorError::Config(format!(
                "strategy 'parameter_server' needs a chief or a worker to train, and cluster {} has none",
                cluster.spec()
            )));
        }
        Ok(ParameterServerStrategy {
            cluster,
            device: options.open_device()?,
            call_timeout: options.collective_timeout,
            connect_timeout: options.connect_timeout,
            token: options.cluster_token.as_ref().map(|t| t.0.clone()),
            partitioner: options.variable_partitioner,
            clients: Mutex::new(None),
        })
    }

    fn num_ps(&self) -> usize {
        self.cluster.spec().tasks(TaskType::Ps).len()
    }

    /// Training tasks (chief and workers): one input pipeline each.
    fn trainers(&self) -> usize {
        self.cluster.collective_group_size().max(1)
    }
}

impl Strategy for ParameterServerStrategy {
    fn kind(&self) -> super::StrategyKind {
        super::StrategyKind::ParameterServer
    }
    fn local_devices(&self) -> Vec<Device> {
        vec![self.device.clone()]
    }
    /// Each update is one task's batch: nothing is combined across tasks before it is
    /// applied.
    fn num_replicas_in_sync(&self) -> usize {
        1
    }
    fn training_input_context(&self) -> InputContext {
        InputContext {
            num_input_pipelines: self.trainers(),
            input_pipeline_id: self.cluster.rank().unwrap_or(0),
            num_replicas_in_sync: self.trainers(),
        }
    }
    fn input_context(&self) -> InputContext {
        // The evaluator task is no training pipeline: it reads the whole evaluation input
        // (sharded like a worker's, it covered 1/N of the examples and reported that).
        if self.cluster.task().task_type == TaskType::Evaluator {
            return InputContext::default();
        }
        InputContext {
            num_input_pipelines: self.trainers(),
            input_pipeline_id: self.cluster.rank().unwrap_or(0),
            // One replica per pipeline, each reading `batch_size` examples per step.
            num_replicas_in_sync: self.trainers(),
        }
    }
    /// Partitioning (when asked for) and placement, only for training: evaluation and
    /// prediction read a checkpoint (which holds partitioned variables whole) in one process.
    fn passes(&self, stage: Stage, training: bool) -> Vec<Box<dyn Pass>> {
        match (stage, training) {
            (Stage::BeforeGradients, true) => match self.partitioner {
                Some(partitioner) => vec![Box::new(PartitionVariables { partitioner })],
                None => Vec::new(),
            },
            (Stage::AfterOptimizer, true) => vec![Box::new(ParameterServerPlacement { num_ps: self.num_ps() })],
            _ => Vec::new(),
        }
    }
    /// Training graphs are split between this task and the ps tasks; evaluation runs here.
    fn partitions(&self, training: bool) -> super::Partitions {
        if training { super::Partitions::WorkerAndPs } else { super::Partitions::Replicated }
    }
    fn parameter_servers(&self, fingerprint: &str) -> Result<Option<Arc<ParameterClients>>> {
        let task = self.cluster.task();
        let mut slot =
            self.clients.lock().map_err(|_| EstimatorError::Other("the ps connections' lock is poisoned".into()))?;
        if let Some((connected_for, clients)) = slot.as_ref() {
            if connected_for == fingerprint {
                return Ok(Some(clients.clone()));
            }
            return Err(EstimatorError::Config(format!(
                "task {task} is connected to the ps tasks for job fingerprint {connected_for}; a second training graph \
                 ({fingerprint}) cannot share them"
            )));
        }
        log::info!("{}: connecting to {} ps task(s) (fingerprint {fingerprint})", self.cluster, self.num_ps());
        let clients = Arc::new(ParameterClients::connect(ClientConfig {
            cluster: self.cluster.clone(),
            fingerprint: fingerprint.to_string(),
            token: self.token.clone(),
            call_timeout: self.call_timeout,
            connect_timeout: self.connect_timeout,
            tls: None,
        })?);
        if self.cluster.is_chief() {
            clients.attend()?;
        }
        *slot = Some((fingerprint.to_string(), clients.clone()));
        Ok(Some(clients))
    }
    fn serve_parameters(&self, plan: Arc<Plan>, fingerprint: &str, precision: Precision) -> Result<Option<u64>> {
        let task = self.cluster.task();
        if task.task_type != TaskType::Ps {
            return Err(EstimatorError::Config(format!("task {task} is not a ps task")));
        }
        let shard = ParameterShard::new(plan, task.index, self.device.clone(), precision)?;
        let served = serve(
            ServeConfig {
                cluster: self.cluster.clone(),
                fingerprint: fingerprint.to_string(),
                token: self.token.clone(),
                connect_timeout: self.connect_timeout,
                linger: self.connect_timeout,
                should_stop: Box::new(|| crate::preemption::requested().map(|s| s.to_string())),
                tls: None,
            },
            shard,
        );
        let step = |s: Option<i64>| s.map(|s| s.max(0) as u64);
        match (served, crate::preemption::requested()) {
            // Drained: the chief checkpointed the values this task held.
            (Ok(s), Some(signal)) => Err(EstimatorError::Preempted { signal: Some(signal), step: step(s) }),
            (Ok(s), None) => Ok(step(s)),
            // Asked to stop: the exit status says so (128 + the signal), for restarts.
            (Err(_), Some(signal)) => Err(EstimatorError::Preempted { signal: Some(signal), step: None }),
            (Err(e), None) => Err(e.into()),
        }
    }
    fn is_chief(&self) -> bool {
        self.cluster.is_chief()
    }
    fn cluster(&self) -> Option<&Cluster> {
        Some(&self.cluster)
    }
    /// The same on every task (no rank), so that fingerprints agree across the cluster.
    fn describe(&self) -> String {
        format!("parameter_server({}; {}; {:?})", self.device, self.cluster.spec(), self.partitioner)
    }
    /// The ps count shapes where variables live, not the addresses.
    fn layout(&self) -> String {
        format!("parameter_server({}; {} ps; {:?})", self.device, self.num_ps(), self.partitioner)
    }
}
