//! `run_config`, `train_spec` and `eval_spec`, with TensorFlow Estimator's defaults.

use super::input::HookSection;
use engine_estimator::{NonFinitePolicy, strategy::StrategyKind};
use engine_runtime::Precision;
use serde::Deserialize;

/// The spec's defaults are the estimator's, written once there.
fn defaults() -> engine_estimator::RunConfig {
    engine_estimator::RunConfig::default()
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Where checkpoints and summaries go: a path or a URL.
    pub model_dir: String,
    /// `None`: the engine uses 0. TensorFlow draws a fresh seed instead; reproducible runs
    /// are worth more here than variety.
    #[serde(default)]
    pub random_seed: Option<u64>,
    #[serde(default = "save_summary_steps")]
    pub save_summary_steps: u64,
    #[serde(default)]
    pub save_checkpoints_steps: Option<u64>,
    #[serde(default)]
    pub save_checkpoints_secs: Option<u64>,
    /// 0 keeps every checkpoint.
    #[serde(default = "keep_checkpoint_max")]
    pub keep_checkpoint_max: usize,
    #[serde(default = "keep_checkpoint_every_n_hours")]
    pub keep_checkpoint_every_n_hours: f64,
    #[serde(default = "log_step_count_steps")]
    pub log_step_count_steps: u64,
    #[serde(default)]
    pub train_distribute: Option<StrategyKind>,
    #[serde(default)]
    pub eval_distribute: Option<StrategyKind>,
    /// `F32` (the default); `F64`: the same graphs with rounding out of the way, for
    /// checking that a strategy trains exactly like one device; `Bf16Mixed`: products and
    /// convolutions in bfloat16, everything else in f32.
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
    /// `multi_worker` only: an elastic job. When a worker is lost the others re-form at
    /// the next step and go on (as torchrun's `--nnodes=MIN:MAX`), down to this many
    /// workers; below it the job stops with a checkpoint. `None` (the default): a lost
    /// worker stops the job.
    #[serde(default)]
    pub min_workers: Option<u64>,
    /// With `min_workers`: the most workers the job trains with (the cluster's chief and
    /// workers by default). More leaves room for tasks from outside the cluster spec, which
    /// a job with a cluster token takes in. The global batch is `batch_size` times this.
    #[serde(default)]
    pub max_workers: Option<u64>,
}

/// The most workers an elastic job can name (as many as `engine launch` starts).
pub const MAX_ELASTIC_WORKERS: u64 = 1024;

/// How long an elastic job's rendezvous waits for more survivors once it has
/// `min_workers` (it waits for `min_workers` themselves as long as a connect does).
const LAST_CALL: std::time::Duration = std::time::Duration::from_secs(2);

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
        #[serde(default = "max_consecutive")]
        max_consecutive: u64,
    },
}

impl RunConfig {
    /// The estimator's settings as this section gives them: the one step from a spec to a
    /// `RunConfig`, which flags then override (`cli::settings`). Devices and the cluster
    /// are not spec fields; they keep the estimator's defaults here.
    pub fn to_estimator(&self) -> engine_estimator::RunConfig {
        let mut config = engine_estimator::RunConfig {
            model_dir: self.model_dir.clone(),
            random_seed: self.random_seed,
            save_summary_steps: self.save_summary_steps,
            save_checkpoints_steps: self.save_checkpoints_steps,
            save_checkpoints_secs: self.save_checkpoints_secs,
            keep_checkpoint_max: self.keep_checkpoint_max,
            keep_checkpoint_every_n_hours: self.keep_checkpoint_every_n_hours,
            log_step_count_steps: self.log_step_count_steps,
            train_distribute: self.train_distribute.unwrap_or_default(),
            eval_distribute: self.eval_distribute,
            precision: self.precision,
            non_finite: match self.non_finite {
                NonFinite::Stop => NonFinitePolicy::Stop,
                NonFinite::Skip { max_consecutive } => NonFinitePolicy::Skip { max_consecutive },
            },
            ..defaults()
        };
        config.strategy.communication = self.communication;
        config.strategy.variable_partitioner = self.variable_partitioner.map(VariablePartitioner::to_pass);
        if self.min_workers.is_some() || self.max_workers.is_some() {
            let count =
                |n: Option<u64>, default: usize| n.map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX));
            config.strategy.elastic = Some(engine_runtime::transport::RoundRules {
                min: count(self.min_workers, 1),
                // 0: the cluster's count, resolved when the cluster is known.
                max: count(self.max_workers, 0),
                last_call: LAST_CALL,
                timeout: config.strategy.connect_timeout,
            });
        }
        config
    }
}

impl VariablePartitioner {
    /// The partitioner as the pass takes it (validated: sizes fit).
    pub fn to_pass(self) -> engine_graph::passes::strategy::Partitioner {
        use engine_graph::passes::strategy::Partitioner;
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        match self {
            VariablePartitioner::MinSize { min_shard_bytes, max_shards } => {
                Partitioner::MinSize { min_shard_bytes: size(min_shard_bytes), max_shards: size(max_shards) }
            }
            VariablePartitioner::FixedShards(n) => Partitioner::FixedShards(size(n)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSpec {
    /// The global step at which training stops; `None` trains until the input ends.
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// Keras' `fit(epochs=...)`: passes over the training input, counted in steps of the
    /// global batch as the strategy shards the input; with `max_steps` too, whichever
    /// comes first ends training.
    #[serde(default)]
    pub epochs: Option<u64>,
    #[serde(default)]
    pub hooks: Vec<HookSection>,
    /// Keras' `fit(class_weight=...)`: the training loss weights each example by its
    /// class's weight (`{6: 2.0}`; a class not listed weighs 1), still divided by the
    /// batch size. Evaluation's loss is not weighted, as in Keras.
    #[serde(default)]
    pub class_weight: std::collections::BTreeMap<u64, f32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSpec {
    /// `None`: evaluate until the input ends.
    #[serde(default)]
    pub steps: Option<u64>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default = "start_delay_secs")]
    pub start_delay_secs: u64,
    #[serde(default = "throttle_secs_default")]
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
            start_delay_secs: start_delay_secs(),
            throttle_secs: throttle_secs_default(),
            every_n_steps: None,
            hooks: Vec::new(),
            exporters: Vec::new(),
        }
    }
}

fn save_summary_steps() -> u64 {
    defaults().save_summary_steps
}

fn keep_checkpoint_max() -> usize {
    defaults().keep_checkpoint_max
}

fn keep_checkpoint_every_n_hours() -> f64 {
    defaults().keep_checkpoint_every_n_hours
}

fn log_step_count_steps() -> u64 {
    defaults().log_step_count_steps
}

fn max_consecutive() -> u64 {
    NonFinitePolicy::DEFAULT_MAX_CONSECUTIVE
}

fn start_delay_secs() -> u64 {
    engine_estimator::EvalSpec::DEFAULT_START_DELAY_SECS
}

fn throttle_secs_default() -> u64 {
    engine_estimator::EvalSpec::DEFAULT_THROTTLE_SECS
}
