//! `run_config`, `train_spec` and `eval_spec`, with TensorFlow Estimator's defaults.

use super::{input::HookSection, strategy::Strategy};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Where checkpoints and summaries go: a path or a URL.
    pub model_dir: String,
    /// `None`: the engine uses 0. TensorFlow draws a fresh seed instead; reproducible runs
    /// are worth more here than variety.
    #[serde(default)]
    pub random_seed: Option<u64>,
    #[serde(default = "hundred")]
    pub save_summary_steps: u64,
    #[serde(default)]
    pub save_checkpoints_steps: Option<u64>,
    #[serde(default)]
    pub save_checkpoints_secs: Option<u64>,
    /// 0 keeps every checkpoint.
    #[serde(default = "five")]
    pub keep_checkpoint_max: usize,
    #[serde(default = "ten_thousand")]
    pub keep_checkpoint_every_n_hours: f64,
    #[serde(default = "hundred")]
    pub log_step_count_steps: u64,
    #[serde(default)]
    pub train_distribute: Option<Strategy>,
    #[serde(default)]
    pub eval_distribute: Option<Strategy>,
    /// `F32` (the default) or `F64`: the same graphs with rounding out of the way, for
    /// checking that a strategy trains exactly like one device.
    #[serde(default)]
    pub precision: Precision,
    /// `multi_worker`'s all-reduce path: `Auto` (shared memory when every task is on one
    /// host, else the gRPC ring), `Ring`, or `SharedMemory` (fail if it is not possible).
    #[serde(default)]
    pub communication: engine_runtime::transport::Communication,
    /// A step whose gradients or updates hold a NaN or an infinity is never applied;
    /// `Stop` (the default) then fails the run naming the value and, when the input is to
    /// blame, the example; `Skip` (or `Skip(max_consecutive: N)`, 100 by default) skips
    /// the batch with a warning, counted in the summaries.
    #[serde(default)]
    pub non_finite: NonFinite,
    /// `parameter_server` only: split large trainable variables into row shards placed on
    /// different ps tasks, as TensorFlow's partitioners do. `MinSize(min_shard_bytes: N,
    /// max_shards: M)` makes as many shards as keep each at least N bytes, at most M;
    /// `FixedShards(N)` makes N. `None` (the default) keeps every variable whole.
    /// Checkpoints hold partitioned variables whole either way.
    #[serde(default)]
    pub variable_partitioner: Option<VariablePartitioner>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum VariablePartitioner {
    MinSize {
        #[serde(default = "min_shard_bytes")]
        min_shard_bytes: u64,
        max_shards: u64,
    },
    FixedShards(u64),
}

/// TensorFlow's `MinSizePartitioner` default: 256 KiB.
fn min_shard_bytes() -> u64 {
    256 << 10
}

/// The most shards a variable may be split into.
pub const MAX_SHARDS: u64 = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum NonFinite {
    #[default]
    Stop,
    Skip {
        #[serde(default = "hundred")]
        max_consecutive: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum Precision {
    #[default]
    F32,
    F64,
}

/// When the chief writes checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointTrigger {
    Steps(u64),
    Secs(u64),
}

/// TensorFlow's default when neither `save_checkpoints_steps` nor `_secs` is set.
pub const DEFAULT_SAVE_CHECKPOINTS_SECS: u64 = 600;

impl RunConfig {
    pub fn seed(&self) -> u64 {
        self.random_seed.unwrap_or(0)
    }

    /// Valid once the spec is validated (at most one of the two is set).
    pub fn checkpoint_trigger(&self) -> CheckpointTrigger {
        match (self.save_checkpoints_steps, self.save_checkpoints_secs) {
            (Some(steps), _) => CheckpointTrigger::Steps(steps),
            (None, Some(secs)) => CheckpointTrigger::Secs(secs),
            (None, None) => CheckpointTrigger::Secs(DEFAULT_SAVE_CHECKPOINTS_SECS),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSpec {
    /// The global step at which training stops; `None` trains until the input ends.
    #[serde(default)]
    pub max_steps: Option<u64>,
    #[serde(default)]
    pub hooks: Vec<HookSection>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSpec {
    /// `None`: evaluate until the input ends.
    #[serde(default)]
    pub steps: Option<u64>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default = "hundred_twenty")]
    pub start_delay_secs: u64,
    #[serde(default = "six_hundred")]
    pub throttle_secs: u64,
    /// Evaluate every this many steps, in addition to TensorFlow's time-based throttle.
    #[serde(default)]
    pub every_n_steps: Option<u64>,
    #[serde(default)]
    pub hooks: Vec<HookSection>,
    /// Exports after evaluations: `[Latest(), Best(metric: "accuracy", higher_is_better:
    /// true), Final()]`.
    #[serde(default)]
    pub exporters: Vec<super::Exporter>,
}

impl Default for EvalSpec {
    fn default() -> Self {
        EvalSpec {
            steps: None,
            name: None,
            start_delay_secs: hundred_twenty(),
            throttle_secs: six_hundred(),
            every_n_steps: None,
            hooks: Vec::new(),
            exporters: Vec::new(),
        }
    }
}

fn five() -> usize {
    5
}

fn hundred() -> u64 {
    100
}

fn hundred_twenty() -> u64 {
    120
}

fn six_hundred() -> u64 {
    600
}

fn ten_thousand() -> f64 {
    10_000.0
}
