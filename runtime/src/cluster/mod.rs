//! The training cluster: which processes exist, where they listen, and which one this is.
//!
//! A [`Cluster`] is TensorFlow's cluster model: `chief`, `worker`, `ps` and `evaluator` task
//! lists of `host:port` addresses (a [`ClusterSpec`]) plus this process's [`TaskId`]. It is
//! resolved from the first of four sources that is configured:
//!
//! 1. the command line, `--cluster "chief=h0:2222;worker=h1:2222,h2:2222" --task worker:1`
//!    (syntax in [`flags`]);
//! 2. `TF_CONFIG`, TensorFlow's JSON, so that launchers written for TensorFlow (Kubeflow's
//!    TFJob, Vertex AI, hand-written scripts) work unchanged ([`tf_config`]);
//! 3. torchrun's environment (`MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE`), every
//!    rank a worker ([`torchrun`]);
//! 4. a Slurm job step (`srun`), as TensorFlow's `SlurmClusterResolver` does it ([`slurm`]).
//!
//! None configured means a single process, and [`resolve`] returns `Ok(None)`. Whatever the
//! source, the cluster goes through one validator, so a cluster that resolves is one every
//! task can agree on; its errors name the source and the task or field to fix.
//!
//! The chief (or worker 0 when there is no chief) does the once-per-cluster work; the chief
//! and the workers form the collective group, ranked chief first; ps and evaluator tasks
//! have no rank.
//!
//! ```
//! use engine_runtime::cluster::{resolve, ClusterFlags, ClusterSource};
//!
//! let tf_config = r#"{"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
//!                     "task": {"type": "worker", "index": 1}}"#;
//! let env = |name: &str| (name == "TF_CONFIG").then(|| tf_config.to_string());
//! let cluster = resolve(&ClusterFlags::default(), &env)?.expect("TF_CONFIG is set");
//! assert_eq!(cluster.to_string(), "worker:1 at localhost:23456");
//! assert_eq!(cluster.source(), ClusterSource::TfConfig);
//! assert_eq!((cluster.rank(), cluster.collective_group_size()), (Some(1), 2));
//! assert!(!cluster.is_chief()); // worker:0 is: the cluster has no chief
//! # Ok::<(), engine_runtime::cluster::ClusterError>(())
//! ```

mod error;
pub mod flags;
mod hostlist;
mod resolve;
pub mod slurm;
mod spec;
mod task;
pub mod tf_config;
pub mod torchrun;
mod validate;

pub use error::{ClusterError, ParseTaskError};
pub use flags::{ClusterFlags, from_flags};
pub use resolve::{resolve, resolve_from_process_env};
pub use slurm::{DEFAULT_SLURM_PORT_BASE, from_slurm};
pub use spec::ClusterSpec;
pub use task::{TaskId, TaskType};
pub use tf_config::{TF_CONFIG, from_tf_config};
pub use torchrun::{RENDEZVOUS_TIMEOUT, from_torchrun};

use std::fmt;

/// Where a cluster came from, so that an error or a log line can send the reader to the
/// launch script, the `TF_CONFIG`, the torchrun command or the Slurm allocation that needs
/// fixing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterSource {
    Flags,
    TfConfig,
    Slurm,
    Torchrun,
}

impl fmt::Display for ClusterSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClusterSource::Flags => "--cluster/--task",
            ClusterSource::TfConfig => "TF_CONFIG",
            ClusterSource::Slurm => "Slurm",
            ClusterSource::Torchrun => "torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)",
        })
    }
}

/// A validated cluster and this process's place in it. The fields are private so that a
/// `Cluster` is always one that passed validation: the task is in the spec (or is an
/// evaluator outside it), and the addresses are canonical `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    spec: ClusterSpec,
    task: TaskId,
    source: ClusterSource,
    environment: Option<String>,
}

impl Cluster {
    /// Validates `spec` and `task` as every source does; `source` only labels the errors.
    pub fn new(
        mut spec: ClusterSpec,
        task: TaskId,
        source: ClusterSource,
        environment: Option<String>,
    ) -> Result<Self, ClusterError> {
        validate::validate(&mut spec, &task, source)?;
        Ok(Cluster { spec, task, source, environment })
    }

    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    pub fn task(&self) -> TaskId {
        self.task
    }

    pub fn source(&self) -> ClusterSource {
        self.source
    }

    /// `TF_CONFIG`'s `"environment"` (`"cloud"` under Kubeflow's TFJob), kept for the code
    /// that must behave differently there; `None` for the other sources.
    pub fn environment(&self) -> Option<&str> {
        self.environment.as_deref()
    }

    /// Where this process listens. `None` only for an evaluator left out of the cluster,
    /// which nobody connects to.
    pub fn address(&self) -> Option<&str> {
        self.spec.address(&self.task)
    }

    /// This process's rank in the collective group (see [`ClusterSpec::collective_rank`]).
    pub fn rank(&self) -> Option<usize> {
        self.spec.collective_rank(&self.task)
    }

    pub fn collective_group_size(&self) -> usize {
        self.spec.collective_group_size()
    }

    /// Whether this process does the once-per-cluster work (see [`ClusterSpec::chief`]).
    pub fn is_chief(&self) -> bool {
        self.spec.is_chief(&self.task)
    }

    /// The `TF_CONFIG` that describes this process, for handing on to a child process.
    pub fn to_tf_config(&self) -> String {
        self.spec.to_tf_config(&self.task, self.environment())
    }
}

/// `worker:1 at 10.0.0.2:2222`: the form errors and logs use to name a process.
impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.address() {
            Some(address) => write!(f, "{} at {address}", self.task),
            None => write!(f, "{} (outside the training cluster)", self.task),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module documentation's example, kept here too because `--lib` runs skip doctests.
    #[test]
    fn the_module_example_holds() -> Result<(), ClusterError> {
        let tf_config = r#"{"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
                            "task": {"type": "worker", "index": 1}}"#;
        let env = |name: &str| (name == "TF_CONFIG").then(|| tf_config.to_string());
        let cluster = resolve(&ClusterFlags::default(), &env)?.expect("TF_CONFIG is set");
        assert_eq!(cluster.to_string(), "worker:1 at localhost:23456");
        assert_eq!(cluster.source(), ClusterSource::TfConfig);
        assert_eq!((cluster.rank(), cluster.collective_group_size()), (Some(1), 2));
        assert!(!cluster.is_chief());
        Ok(())
    }

    #[test]
    fn a_cluster_is_validated_when_built() {
        let spec = ClusterSpec { worker: vec!["a:1".into()], ..ClusterSpec::default() };
        let error = Cluster::new(spec, TaskId::new(TaskType::Worker, 1), ClusterSource::Flags, None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--cluster/--task: task worker:1 is out of range: the cluster has 1 worker (worker:0)"
        );
    }

    #[test]
    fn a_cluster_answers_for_its_own_task() {
        let spec = ClusterSpec { chief: vec!["c:1".into()], worker: vec!["w:1".into()], ..ClusterSpec::default() };
        let worker = Cluster::new(spec.clone(), TaskId::new(TaskType::Worker, 0), ClusterSource::Slurm, None).unwrap();
        assert_eq!(worker.to_string(), "worker:0 at w:1");
        assert_eq!((worker.rank(), worker.is_chief(), worker.collective_group_size()), (Some(1), false, 2));
        let chief = Cluster::new(spec, TaskId::new(TaskType::Chief, 0), ClusterSource::Slurm, None).unwrap();
        assert_eq!((chief.rank(), chief.is_chief()), (Some(0), true));
    }

    #[test]
    fn an_evaluator_outside_the_cluster_has_no_address_and_no_rank() {
        let spec = ClusterSpec { worker: vec!["w:1".into()], ..ClusterSpec::default() };
        let evaluator = Cluster::new(spec, TaskId::new(TaskType::Evaluator, 0), ClusterSource::TfConfig, None).unwrap();
        assert_eq!(evaluator.to_string(), "evaluator:0 (outside the training cluster)");
        assert_eq!((evaluator.address(), evaluator.rank(), evaluator.is_chief()), (None, None, false));
    }

    #[test]
    fn to_tf_config_round_trips() {
        let spec = ClusterSpec {
            chief: vec!["c:1".into()],
            worker: vec!["w:1".into(), "w:2".into()],
            ps: vec!["p:1".into()],
            evaluator: vec!["e:1".into()],
        };
        let cluster =
            Cluster::new(spec, TaskId::new(TaskType::Ps, 0), ClusterSource::TfConfig, Some("cloud".into())).unwrap();
        assert_eq!(from_tf_config(&cluster.to_tf_config()), Ok(Some(cluster)));
    }
}
