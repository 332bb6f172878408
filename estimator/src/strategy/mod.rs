//! Distribution strategies, chosen by kind.
//!
//! A strategy is graph passes (at three stages of compilation) plus the run-time shape of
//! its replicas: how many, on which devices, joined by which collective. The training
//! loop never branches on the strategy's kind: it compiles with the strategy's passes,
//! runs one executor per local replica (and per partition), and feeds each replica its
//! own batch.

mod central_storage;
mod default;
#[cfg(test)]
mod evaluator_input;
mod kind;
mod mirrored;
mod multi_worker;
mod parameter_server;

pub use central_storage::CentralStorageStrategy;
pub use default::DefaultStrategy;
pub use kind::{StrategyKind, UnknownStrategy};
pub use mirrored::MirroredStrategy;
pub use multi_worker::MultiWorkerStrategy;
pub(crate) use multi_worker::trains;
pub use parameter_server::ParameterServerStrategy;

use crate::{EstimatorError, Result, input::InputContext};
use engine_graph::passes::Pass;
use engine_runtime::{
    Collective, CrossDeviceOps, Device, DeviceName, Precision,
    cluster::Cluster,
    transport::{Communication, Membership, RoundRules, ps::ParameterClients},
};
use std::sync::Arc;
use std::time::Duration;

/// How a strategy's compiled graph splits into executors in a process: the session builds
/// this layout because the strategy says so, not by reading the graph's placements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitions {
    /// One executor per local replica, each running the whole graph on its device.
    Replicated,
    /// One executor per local replica for `Placement::Replica`, and one on the host CPU for
    /// `Placement::Host` (variables and their updates), joined by an exchange.
    HostAndReplicas,
    /// One executor for `Placement::Worker`; the variables live on the ps tasks.
    WorkerAndPs,
}

/// Where in compilation a strategy's passes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before autodiff (loss scaling).
    BeforeGradients,
    /// After autodiff, before the optimizer: rewrite gradients (all-reduce, buckets).
    Gradients,
    /// After the optimizer: placement and partitioning.
    AfterOptimizer,
}

pub trait Strategy: Send + Sync {
    fn kind(&self) -> StrategyKind;
    fn name(&self) -> &'static str {
        self.kind().name()
    }
    /// Replicas in this process, one device each.
    fn local_devices(&self) -> Vec<Device>;
    /// Replicas across the whole job (the global batch is per-replica batch times this).
    fn num_replicas_in_sync(&self) -> usize {
        self.local_devices().len()
    }
    /// This process's input pipeline and its place among the job's pipelines.
    fn input_context(&self) -> InputContext;
    /// The input context of a training pipeline, also on a task that trains none (the
    /// evaluator): what an epoch is counted in, the same for every pipeline.
    fn training_input_context(&self) -> InputContext {
        self.input_context()
    }
    /// Passes for a graph of this mode at `stage`.
    fn passes(&self, stage: Stage, training: bool) -> Vec<Box<dyn Pass>>;
    /// How those passes partition the graph of this mode.
    fn partitions(&self, training: bool) -> Partitions {
        let _ = training;
        Partitions::Replicated
    }
    /// Collectives for `local` replicas of this process, one handle per replica, for the
    /// graph with job `fingerprint` (a cross-process group refuses peers whose differs).
    fn collectives(&self, local: usize, fingerprint: &str) -> Result<Option<Vec<Arc<dyn Collective>>>> {
        let _ = (local, fingerprint);
        Ok(None)
    }
    /// Connections to the ps tasks that hold the variables, when the graph was placed on
    /// them (for the graph with job `fingerprint`, which the ps tasks check).
    fn parameter_servers(&self, fingerprint: &str) -> Result<Option<Arc<ParameterClients>>> {
        let _ = fingerprint;
        Ok(None)
    }
    /// Serves this task's share of the variables of `plan` until training ends, when this
    /// task is a ps task. Returns the final global step if this task held it.
    fn serve_parameters(
        &self,
        plan: Arc<engine_graph::Plan>,
        fingerprint: &str,
        precision: Precision,
    ) -> Result<Option<u64>> {
        let _ = (plan, fingerprint, precision);
        Err(EstimatorError::Config(format!("strategy '{}' has no ps tasks to serve", self.name())))
    }
    /// The cluster when replicas span processes: training then starts by taking the
    /// chief's variables, and `train_and_evaluate` follows the task's role.
    fn cluster(&self) -> Option<&Cluster> {
        None
    }
    /// Threads each local replica's pool gets (`None`: one replica on the global pool).
    fn threads_per_replica(&self) -> Option<usize> {
        None
    }
    /// Whether this process writes checkpoints and summaries.
    fn is_chief(&self) -> bool {
        true
    }
    /// The current membership, when the strategy re-forms its group after a lost member
    /// (an elastic `multi_worker` job); `None` otherwise.
    fn elastic_membership(&self) -> Option<Membership> {
        None
    }
    /// How an elastic job re-forms (its worker bounds), when it is one.
    fn elastic_rules(&self) -> Option<RoundRules> {
        None
    }
    /// Whether this task leads the survivors of a failed re-formation (the chief, or the
    /// lowest-ranked survivor when the chief was lost): it saves their state before the job
    /// stops.
    fn leads_survivors(&self) -> bool {
        self.is_chief()
    }
    /// For a task of an elastic job starting up: whether the job already runs without it
    /// (it is new, or was lost and started again), in which case this joins it at its next
    /// step and the membership includes this task. `fingerprint` is the job's first graph's.
    fn join_running_job(&self, fingerprint: &str) -> Result<bool> {
        let _ = fingerprint;
        Ok(false)
    }
    /// Re-forms the group after a step failed at `step` (the last one this task
    /// completed): the survivors agree on the next membership, whose holder's state every
    /// member continues from. Only for strategies with an elastic membership.
    fn reform(&self, step: u64) -> Result<Membership> {
        let _ = step;
        Err(EstimatorError::Config(format!("strategy '{}' cannot re-form its replicas", self.name())))
    }
    /// What about the strategy shapes the trained model, for the fingerprint checkpoints
    /// record: a restarted job with new addresses (a launcher picks free ports) is the same
    /// job. By default `describe()`.
    fn layout(&self) -> String {
        self.describe()
    }
    /// Identifies the strategy and its devices in the job fingerprint.
    fn describe(&self) -> String {
        format!("{}({})", self.name(), self.local_devices().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
    }
}

/// What a strategy is built from besides its kind.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyOptions {
    /// The device of single-device strategies, and the kind of device replicas use when
    /// `devices` is not given.
    pub device: DeviceName,
    /// Explicit replica devices (`cpu:0,cpu:1`); by default one CPU replica per core.
    pub devices: Option<Vec<DeviceName>>,
    pub cross_device_ops: CrossDeviceOps,
    /// Bytes per gradient bucket (PyTorch's 25 MiB by default; the first bucket is 1 MiB).
    pub all_reduce_bucket_bytes: usize,
    /// How long a collective waits for a missing replica.
    pub collective_timeout: Duration,
    /// The cluster for `multi_worker` and `parameter_server`.
    pub cluster: Option<Cluster>,
    pub cluster_token: Option<crate::ClusterToken>,
    pub connect_timeout: Duration,
    /// `multi_worker`'s all-reduce path: shared memory on one host (`Auto`), or the ring.
    pub communication: Communication,
    /// `parameter_server`'s variable partitioner (`None`: variables stay whole).
    pub variable_partitioner: Option<engine_graph::passes::strategy::Partitioner>,
    /// `multi_worker` only: train on when a worker is lost, re-forming the group with the
    /// survivors (down to `min`) at the next step; `None` stops the job instead. The
    /// rendezvous waits for `min` survivors up to `connect_timeout` (its `timeout` is
    /// replaced by it); `max` 0 means the cluster's chief and workers.
    pub elastic: Option<RoundRules>,
}

impl Default for StrategyOptions {
    fn default() -> Self {
        StrategyOptions {
            device: DeviceName::CPU,
            devices: None,
            cross_device_ops: CrossDeviceOps::default(),
            all_reduce_bucket_bytes: 25 << 20,
            collective_timeout: Duration::from_secs(300),
            cluster: None,
            cluster_token: None,
            connect_timeout: Duration::from_secs(120),
            communication: Communication::Auto,
            variable_partitioner: None,
            elastic: None,
        }
    }
}

impl StrategyOptions {
    /// The device of single-device strategies, opened.
    pub fn open_device(&self) -> Result<Device> {
        Ok(Device::open(self.device)?)
    }

    /// The replica devices: explicit ones, else one CPU device per available core.
    pub fn replica_devices(&self) -> Result<Vec<Device>> {
        match &self.devices {
            Some(list) => list.iter().map(|d| Ok(announced(Device::open(*d)?))).collect(),
            None => {
                let base = announced(self.open_device()?);
                if !self.device.is_cpu() {
                    return Ok(vec![base]);
                }
                let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).max(2);
                (0..cores).map(|i| Ok(Device::open(DeviceName::cpu(i))?)).collect()
            }
        }
    }
}

/// Logs which hardware a device is (an accelerator's name), once per process and device.
pub(crate) fn announced(device: Device) -> Device {
    if let Some(hardware) = device.hardware() {
        let name = device.to_string();
        if crate::once::first_time(&format!("device {name}")) {
            if device.tunes_kernels() {
                log::info!(
                    "{name} is {hardware}; its matmul and convolution kernels are tuned at the first step that \
                     meets each shape (minutes on cuda; CUBECL_AUTOTUNE_LEVEL=minimal tunes less)"
                );
            } else {
                log::info!("{name} is {hardware}");
            }
        }
    }
    device
}

/// Threads per replica when `replicas` share this machine's cores.
pub(crate) fn threads_for(replicas: usize) -> usize {
    let cores = engine_runtime::ComputeThreads::get().count;
    (cores / replicas.max(1)).max(1)
}
