//! RunConfig: where and how often the training loop saves, logs and summarizes, with
//! TensorFlow's defaults.

use crate::{EstimatorError, Result, model_dir::S3Options, strategy::StrategyOptions};
use engine_graph::passes::strategy::Partitioner;
use engine_runtime::{CrossDeviceOps, Precision, cluster::Cluster, transport::Communication};
use std::time::Duration;

/// A cluster's shared secret; `Debug` never prints it (RunConfig is logged at start).
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterToken(pub String);

impl std::fmt::Debug for ClusterToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterToken(<redacted>)")
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// A local path or a URL (`file://`, `memory://`, `s3://bucket/prefix`).
    pub model_dir: String,
    /// Seeds initializers and dropout. TensorFlow's `None` means "random"; so does ours,
    /// and the seed drawn is logged so the run can be repeated.
    pub random_seed: Option<u64>,
    /// Steps between training summaries (0 disables them).
    pub save_summary_steps: u64,
    pub save_checkpoints_steps: Option<u64>,
    /// Defaults to 600 when neither checkpoint trigger is set, as in TensorFlow.
    pub save_checkpoints_secs: Option<u64>,
    /// 0 keeps every checkpoint.
    pub keep_checkpoint_max: usize,
    pub keep_checkpoint_every_n_hours: f64,
    /// Steps between the loss/steps-per-second log lines.
    pub log_step_count_steps: u64,
    /// Strategy names (`default`, `mirrored`, ...); `None` is `default`.
    pub train_distribute: Option<String>,
    pub eval_distribute: Option<String>,
    /// `cpu`, `wgpu:0`, `cuda:0`.
    pub device: String,
    /// Replica devices for `mirrored` and `central_storage` (`cpu:0`, `cpu:1`); by default
    /// one CPU replica per core.
    pub devices: Option<Vec<String>>,
    /// How in-process replicas all-reduce: `Ring` or `ReductionToOneDevice`.
    pub cross_device_ops: CrossDeviceOps,
    /// Gradient bucket size for all-reduce fusion.
    pub all_reduce_bucket_bytes: usize,
    /// How long a collective waits for a missing replica or worker.
    pub collective_timeout: Duration,
    /// The precision floats are computed in: f32 for training; f64 runs the same graphs
    /// with rounding out of the way (strategy equivalence tests).
    pub precision: Precision,
    /// Object-store credentials when `model_dir` is an `s3://` URL and the environment
    /// does not provide them.
    pub s3: Option<S3Options>,
    /// The cluster this process belongs to (TensorFlow reads `TF_CONFIG` into RunConfig;
    /// the CLI resolves flags, `TF_CONFIG` or Slurm into this). `None`: a single process.
    pub cluster: Option<Cluster>,
    /// The shared secret every task of the cluster presents to the others.
    pub cluster_token: Option<ClusterToken>,
    /// How long a task waits at start for every other task of the collective group.
    pub connect_timeout: Duration,
    /// How `multi_worker` tasks all-reduce: TensorFlow's `CommunicationOptions`, with shared
    /// memory for tasks on one host where TensorFlow has NCCL for GPUs.
    pub communication: Communication,
    /// What training does with a step whose gradients or updates are NaN or infinite
    /// (the step itself never changes a variable then).
    pub non_finite: NonFinitePolicy,
    /// `parameter_server`: split large variables into row shards on different ps tasks
    /// (TensorFlow's `variable_partitioner`); `None` keeps every variable whole.
    pub variable_partitioner: Option<Partitioner>,
}

/// One line for the log, as a user wrote it (no Rust formatting; the token never shown).
impl std::fmt::Display for RunConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or_default = |s: &Option<String>| s.clone().unwrap_or_else(|| "default".into());
        write!(f, "model_dir {}, random_seed {}", self.model_dir, self.seed())?;
        match self.checkpoint_trigger() {
            CheckpointTrigger::Steps(n) => write!(f, ", checkpoints every {n} steps")?,
            CheckpointTrigger::Secs(d) => write!(f, ", checkpoints every {} s", d.as_secs())?,
        }
        write!(
            f,
            ", keep_checkpoint_max {}, summaries every {} steps, logs every {} steps, train_distribute {}, \
             eval_distribute {}, device {}, precision {:?}",
            self.keep_checkpoint_max,
            self.save_summary_steps,
            self.log_step_count_steps,
            or_default(&self.train_distribute),
            or_default(&self.eval_distribute),
            self.devices.as_ref().map(|d| d.join(",")).unwrap_or_else(|| self.device.clone()),
            self.precision,
        )?;
        if let Some(c) = &self.cluster {
            write!(f, ", task {} of cluster {}", c.task(), c.spec())?;
        }
        match self.non_finite {
            NonFinitePolicy::Stop => write!(f, ", non-finite steps stop training"),
            NonFinitePolicy::Skip { max_consecutive } => {
                write!(f, ", non-finite steps are skipped (at most {max_consecutive} in a row)")
            }
        }
    }
}

/// What training does with a step that produced a NaN or an infinity in a gradient or an
/// update. Either way the step commits nothing: the variables stay as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NonFinitePolicy {
    /// Fail the run, naming the step, the first variable whose gradient (or update) is not
    /// finite and, when the input batch holds a NaN or an infinity, the example and file.
    #[default]
    Stop,
    /// Log a warning, leave the global step where it is and go on with the next batch;
    /// the summaries count skipped batches (`non_finite_batches_skipped`). More than
    /// `max_consecutive` skips in a row fail the run as `Stop` would: the model diverged.
    Skip { max_consecutive: u64 },
}

impl NonFinitePolicy {
    /// What `Skip` allows in a row unless told otherwise.
    pub const DEFAULT_MAX_CONSECUTIVE: u64 = 100;
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            model_dir: String::new(),
            random_seed: None,
            save_summary_steps: 100,
            save_checkpoints_steps: None,
            save_checkpoints_secs: None,
            keep_checkpoint_max: 5,
            keep_checkpoint_every_n_hours: 10000.0,
            log_step_count_steps: 100,
            train_distribute: None,
            eval_distribute: None,
            device: "cpu".into(),
            devices: None,
            cross_device_ops: CrossDeviceOps::default(),
            all_reduce_bucket_bytes: 25 << 20,
            collective_timeout: Duration::from_secs(300),
            precision: Precision::F32,
            s3: None,
            cluster: None,
            cluster_token: None,
            connect_timeout: Duration::from_secs(120),
            communication: Communication::Auto,
            non_finite: NonFinitePolicy::Stop,
            variable_partitioner: None,
        }
    }
}

/// When checkpoints are saved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CheckpointTrigger {
    Steps(u64),
    Secs(Duration),
}

impl RunConfig {
    pub fn new(model_dir: impl Into<String>) -> Self {
        RunConfig { model_dir: model_dir.into(), ..Default::default() }
    }

    /// TensorFlow refuses both checkpoint triggers at once; so do we.
    pub fn validate(&self) -> Result<()> {
        if self.model_dir.is_empty() {
            return Err(EstimatorError::Config("model_dir is required".into()));
        }
        if self.save_checkpoints_steps.is_some() && self.save_checkpoints_secs.is_some() {
            return Err(EstimatorError::Config(
                "save_checkpoints_steps and save_checkpoints_secs are mutually exclusive; set one".into(),
            ));
        }
        if self.save_checkpoints_steps == Some(0) {
            return Err(EstimatorError::Config("save_checkpoints_steps must be positive".into()));
        }
        if !(self.keep_checkpoint_every_n_hours > 0.0) {
            return Err(EstimatorError::Config("keep_checkpoint_every_n_hours must be positive".into()));
        }
        Ok(())
    }

    pub fn checkpoint_trigger(&self) -> CheckpointTrigger {
        match (self.save_checkpoints_steps, self.save_checkpoints_secs) {
            (Some(s), _) => CheckpointTrigger::Steps(s),
            (None, Some(s)) => CheckpointTrigger::Secs(Duration::from_secs(s)),
            (None, None) => CheckpointTrigger::Secs(Duration::from_secs(600)),
        }
    }

    /// What strategies are built from.
    pub fn strategy_options(&self) -> StrategyOptions {
        StrategyOptions {
            device: self.device.clone(),
            devices: self.devices.clone(),
            cross_device_ops: self.cross_device_ops,
            all_reduce_bucket_bytes: self.all_reduce_bucket_bytes,
            collective_timeout: self.collective_timeout,
            cluster: self.cluster.clone(),
            cluster_token: self.cluster_token.clone(),
            connect_timeout: self.connect_timeout,
            communication: self.communication,
            variable_partitioner: self.variable_partitioner,
        }
    }

    /// The seed in effect: the configured one, or one drawn from the clock.
    pub fn seed(&self) -> u64 {
        // Every task of a cluster must build the same graph (dropout seeds are in it, and
        // the handshake compares fingerprints): without a configured seed they agree on
        // one derived from the cluster, not from each machine's clock.
        if let (None, Some(c)) = (self.random_seed, &self.cluster) {
            return engine_graph::derive_seed(0, &c.spec().to_string());
        }
        self.random_seed.unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_tensorflow() {
        let c = RunConfig::new("m");
        assert_eq!(c.save_summary_steps, 100);
        assert_eq!(c.keep_checkpoint_max, 5);
        assert_eq!(c.log_step_count_steps, 100);
        assert_eq!(c.checkpoint_trigger(), CheckpointTrigger::Secs(Duration::from_secs(600)));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn checkpoint_triggers_are_exclusive() {
        let c = RunConfig { save_checkpoints_steps: Some(10), save_checkpoints_secs: Some(5), ..RunConfig::new("m") };
        assert!(c.validate().is_err());
        let c = RunConfig { save_checkpoints_steps: Some(10), ..RunConfig::new("m") };
        assert_eq!(c.checkpoint_trigger(), CheckpointTrigger::Steps(10));
    }
}
