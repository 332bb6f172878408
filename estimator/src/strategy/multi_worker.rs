//! `multi_worker`: TensorFlow's MultiWorkerMirroredStrategy. Every chief and worker task of
//! the cluster is one replica in its own process; the graph passes are mirrored's (loss
//! scaled by the global replica count, gradients all-reduced in buckets), and the
//! collective behind the `AllReduce` nodes is the network group instead of threads.
//!
//! The group connects lazily, when the first graph is compiled: the handshake compares
//! the compiled graph's fingerprint, so a task started with another spec is refused before
//! any step runs. It is kept for the life of the strategy, so successive `train` calls
//! (and their collectives' sequence numbers) continue on one connection.

use super::{Stage, Strategy, StrategyOptions, mirrored::all_reduce_passes};
use crate::{EstimatorError, Result, input::InputContext};
use engine_graph::passes::{Pass, strategy::AgreeOnStop};
use engine_runtime::{
    Collective, Device,
    cluster::{Cluster, TaskType},
    transport::{Communication, NetworkConfig, NetworkGroup},
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct MultiWorkerStrategy {
    cluster: Cluster,
    device: Device,
    bucket_bytes: usize,
    collective_timeout: Duration,
    connect_timeout: Duration,
    token: Option<String>,
    communication: Communication,
    /// The connected group and the fingerprint it was connected for.
    group: Mutex<Option<(String, Arc<NetworkGroup>)>>,
}

impl MultiWorkerStrategy {
    pub fn new(options: &StrategyOptions) -> Result<Self> {
        let cluster = options.cluster.clone().ok_or_else(|| {
            EstimatorError::Config(
                "strategy 'multi_worker' needs a cluster: set TF_CONFIG, pass --cluster and --task, run under torchrun \
                 or Slurm, or start a local one with `engine launch`"
                    .into(),
            )
        })?;
        let ps = cluster.spec().tasks(TaskType::Ps);
        if !ps.is_empty() {
            return Err(EstimatorError::Config(format!(
                "strategy 'multi_worker' keeps every variable on every worker, but cluster {} has {} ps task(s): use \
                 --strategy parameter_server, or remove the ps tasks",
                cluster.spec(),
                ps.len()
            )));
        }
        Ok(MultiWorkerStrategy {
            cluster,
            device: options.open_device()?,
            bucket_bytes: options.all_reduce_bucket_bytes,
            collective_timeout: options.collective_timeout,
            connect_timeout: options.connect_timeout,
            token: options.cluster_token.as_ref().map(|t| t.0.clone()),
            communication: options.communication,
            group: Mutex::new(None),
        })
    }

    fn replicas(&self) -> usize {
        self.cluster.collective_group_size().max(1)
    }
}

impl Strategy for MultiWorkerStrategy {
    fn kind(&self) -> super::StrategyKind {
        super::StrategyKind::MultiWorker
    }
    fn local_devices(&self) -> Vec<Device> {
        vec![self.device.clone()]
    }
    fn num_replicas_in_sync(&self) -> usize {
        self.replicas()
    }
    fn training_input_context(&self) -> InputContext {
        InputContext {
            num_input_pipelines: self.replicas(),
            input_pipeline_id: self.cluster.rank().unwrap_or(0),
            num_replicas_in_sync: self.replicas(),
        }
    }
    fn input_context(&self) -> InputContext {
        // The evaluator task is no training pipeline: it reads the whole evaluation input
        // (sharded like a worker's, it covered 1/N of the examples and reported that).
        if self.cluster.task().task_type == TaskType::Evaluator {
            return InputContext::default();
        }
        InputContext {
            num_input_pipelines: self.replicas(),
            input_pipeline_id: self.cluster.rank().unwrap_or(0),
            num_replicas_in_sync: self.replicas(),
        }
    }
    /// Mirrored's, and tasks agree on a final step when one of them is asked to stop.
    fn passes(&self, stage: Stage, training: bool) -> Vec<Box<dyn Pass>> {
        let mut passes = all_reduce_passes(stage, training, self.replicas(), self.bucket_bytes);
        if stage == Stage::Gradients && training {
            // Before fusion, which packs the request into the last bucket.
            let at = passes.iter().position(|p| p.name() == "all-reduce-fusion").unwrap_or(passes.len());
            passes.insert(at, Box::new(AgreeOnStop));
        }
        passes
    }
    fn collectives(&self, local: usize, fingerprint: &str) -> Result<Option<Vec<Arc<dyn Collective>>>> {
        let task = self.cluster.task();
        if self.cluster.rank().is_none() {
            return Err(EstimatorError::Config(format!(
                "task {task} is not in the collective group (only the chief and workers train)"
            )));
        }
        if local != 1 {
            return Err(EstimatorError::Config(format!("multi_worker runs one replica per task, not {local}")));
        }
        let mut slot = self.group.lock().map_err(|_| EstimatorError::Other("collective group lock poisoned".into()))?;
        if let Some((connected_for, group)) = slot.as_ref() {
            if connected_for == fingerprint {
                return Ok(Some(vec![group.clone() as Arc<dyn Collective>]));
            }
            return Err(EstimatorError::Config(format!(
                "task {task} is already connected for job fingerprint {connected_for}; a second graph ({fingerprint}) \
                 cannot share its collective group"
            )));
        }
        log::info!("{}: connecting to {} tasks (fingerprint {fingerprint})", self.cluster, self.replicas());
        let group = NetworkGroup::connect(NetworkConfig {
            cluster: self.cluster.clone(),
            fingerprint: fingerprint.to_string(),
            token: self.token.clone(),
            collective_timeout: self.collective_timeout,
            connect_timeout: self.connect_timeout,
            tls: None,
            communication: self.communication,
        })?;
        match group.ring_reason() {
            None => log::info!("{}: all-reduce through shared memory (every task is on this host)", self.cluster),
            Some(reason) => log::info!("{}: all-reduce over the gRPC ring ({reason})", self.cluster),
        }
        *slot = Some((fingerprint.to_string(), group.clone()));
        Ok(Some(vec![group as Arc<dyn Collective>]))
    }
    fn is_chief(&self) -> bool {
        self.cluster.is_chief()
    }
    fn cluster(&self) -> Option<&Cluster> {
        Some(&self.cluster)
    }
    /// The same on every task (no rank), so that fingerprints agree across the cluster.
    fn describe(&self) -> String {
        format!("multi_worker({}; {})", self.device, self.cluster.spec())
    }
    /// The replica count and device, not the addresses.
    fn layout(&self) -> String {
        format!("multi_worker({}; {} replicas)", self.device, self.replicas())
    }
}

/// Whether a task trains (chief, worker) or only evaluates.
pub(crate) fn trains(cluster: &Cluster) -> bool {
    matches!(cluster.task().task_type, TaskType::Chief | TaskType::Worker)
}
