//! RunConfig: where and how often the training loop saves, logs and summarizes, with
//! TensorFlow's defaults.

use crate::{
    EstimatorError, Result,
    model_dir::S3Options,
    strategy::{StrategyKind, StrategyOptions},
};
use engine_runtime::Precision;
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
    /// Seeds initializers and dropout; `None` is 0 (see [`seed`](Self::seed)).
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
    /// The strategy training runs under (TensorFlow's `train_distribute`).
    pub train_distribute: StrategyKind,
    /// The strategy evaluation runs under; `None`: `train_distribute`'s
    /// [`for_evaluation`](StrategyKind::for_evaluation).
    pub eval_distribute: Option<StrategyKind>,
    /// What strategies are built from: devices, the cluster, collective settings.
    pub strategy: StrategyOptions,
    /// The precision floats are computed in: f32 for training; f64 runs the same graphs
    /// with rounding out of the way (strategy equivalence tests); `Bf16Mixed` multiplies
    /// in bfloat16 and keeps everything else f32 (see [`Precision`]).
    pub precision: Precision,
    /// Object-store credentials when `model_dir` is an `s3://` URL and the environment
    /// does not provide them.
    pub s3: Option<S3Options>,
    /// What training does with a step whose gradients or updates are NaN or infinite
    /// (the step itself never changes a variable then).
    pub non_finite: NonFinitePolicy,
}

/// One line for the log, as a user wrote it (no Rust formatting; the token never shown).
impl std::fmt::Display for RunConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
            self.train_distribute,
            self.eval_strategy(),
            match &self.strategy.devices {
                Some(d) => d.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
                None => self.strategy.device.to_string(),
            },
            self.precision,
        )?;
        if let Some(c) = &self.strategy.cluster {
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
            train_distribute: StrategyKind::Default,
            eval_distribute: None,
            strategy: StrategyOptions::default(),
            precision: Precision::F32,
            s3: None,
            non_finite: NonFinitePolicy::Stop,
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
        // NaN included.
        if self.keep_checkpoint_every_n_hours.is_nan() || self.keep_checkpoint_every_n_hours <= 0.0 {
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

    /// The strategy evaluation runs under.
    pub fn eval_strategy(&self) -> StrategyKind {
        self.eval_distribute.unwrap_or(self.train_distribute).for_evaluation()
    }

    /// The strategy the Estimator runs `mode` under: prediction always on one device.
    pub fn strategy_for(&self, mode: crate::Mode) -> StrategyKind {
        match mode {
            crate::Mode::Train => self.train_distribute,
            crate::Mode::Eval => self.eval_strategy(),
            crate::Mode::Predict => StrategyKind::Default,
        }
    }

    /// The seed in effect: the configured one, else 0. TensorFlow draws a fresh seed when
    /// none is set; here a run repeats, `engine plan` shows the graph training runs (dropout
    /// seeds are in it), and every task of a cluster builds the same graph without agreeing
    /// on anything first.
    pub fn seed(&self) -> u64 {
        self.random_seed.unwrap_or(0)
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
