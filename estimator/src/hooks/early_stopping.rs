//! Early stopping on evaluation results (TensorFlow's `stop_if_no_decrease_hook`,
//! `stop_if_higher_hook`, ...): reads the metric from the evaluation event files every N
//! steps and requests a stop when the condition holds; with `restore_best_weights`, training
//! then ends with the variables of the best evaluated checkpoint, as Keras' callback does.

use super::{HookContext, RunValues, SessionRunHook};
use crate::{
    Result,
    checkpoint::Lease,
    summary::{event_files, read_event_file},
};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum StopCondition {
    /// No new minimum of the metric for this many training steps.
    NoDecrease {
        max_steps_without_decrease: u64,
    },
    /// No new maximum for this many training steps.
    NoIncrease {
        max_steps_without_increase: u64,
    },
    Higher {
        threshold: f64,
    },
    Lower {
        threshold: f64,
    },
}

/// How a log line says what happened: `had no new minimum for 150 steps`.
impl std::fmt::Display for StopCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopCondition::NoDecrease { max_steps_without_decrease: n } => {
                write!(f, "had no new minimum for {n} steps")
            }
            StopCondition::NoIncrease { max_steps_without_increase: n } => {
                write!(f, "had no new maximum for {n} steps")
            }
            StopCondition::Higher { threshold } => write!(f, "went above {threshold}"),
            StopCondition::Lower { threshold } => write!(f, "went below {threshold}"),
        }
    }
}

/// `(step, value)` of `metric` in the evaluation events of `eval_dir`, in step order.
pub(super) fn eval_history(ctx: &HookContext<'_>, eval_dir: &str, metric: &str) -> Result<Vec<(u64, f64)>> {
    let mut points = Vec::new();
    for file in event_files(ctx.model_dir, eval_dir)? {
        for event in read_event_file(ctx.model_dir, &file)? {
            let Some(summary) = event.summary else { continue };
            for v in summary.value {
                if v.tag == metric
                    && let Some(x) = v.simple_value
                {
                    points.push((event.step as u64, x as f64));
                }
            }
        }
    }
    points.sort_by_key(|p| p.0);
    Ok(points)
}

impl StopCondition {
    /// Whether `a` is a better value than `b`: lower for the conditions that watch for a
    /// decrease or a fall below, higher for the others (Keras' `mode`).
    fn better(&self, a: f64, b: f64) -> bool {
        match self {
            StopCondition::NoDecrease { .. } | StopCondition::Lower { .. } => a < b,
            StopCondition::NoIncrease { .. } | StopCondition::Higher { .. } => a > b,
        }
    }
}

/// How long the best checkpoint is leased against the saver's garbage collection; renewed
/// at every check, so it only runs out when the run is gone.
const BEST_LEASE: Duration = Duration::from_secs(24 * 3600);

pub struct EarlyStoppingHook {
    metric: String,
    condition: StopCondition,
    eval_dir: String,
    min_steps: u64,
    run_every_steps: u64,
    /// Keras' `restore_best_weights`: on an early stop, the final checkpoint holds the
    /// variables of the evaluated checkpoint with the best metric.
    restore_best_weights: bool,
    /// The best checkpoint, leased so that `keep_checkpoint_max` does not delete it first.
    best: Option<Lease>,
}

impl EarlyStoppingHook {
    /// `eval_dir` is `eval` or `eval_<name>`, as evaluation writes it.
    pub fn new(metric: &str, condition: StopCondition, eval_dir: &str, min_steps: u64, run_every_steps: u64) -> Self {
        EarlyStoppingHook {
            metric: metric.into(),
            condition,
            eval_dir: eval_dir.into(),
            min_steps,
            run_every_steps: run_every_steps.max(1),
            restore_best_weights: false,
            best: None,
        }
    }

    /// On an early stop, training ends with the best evaluated checkpoint's variables.
    pub fn restore_best_weights(mut self) -> Self {
        self.restore_best_weights = true;
        self
    }

    /// The step of the first best value (a later equal one is no improvement, as in Keras).
    pub fn best_step(&self, history: &[(u64, f64)]) -> Option<u64> {
        let mut best: Option<(u64, f64)> = None;
        for &(step, v) in history {
            if best.is_none_or(|b| self.condition.better(v, b.1)) {
                best = Some((step, v));
            }
        }
        best.map(|b| b.0)
    }

    /// Keeps a lease on the best checkpoint so far (the chief only: it owns the model dir).
    /// A best checkpoint already deleted (evaluated after `keep_checkpoint_max` newer
    /// saves) is reported once and the previous lease kept.
    fn lease_best(&mut self, ctx: &HookContext<'_>, step: u64) -> Result<()> {
        let name = format!("model.ckpt-{step}");
        match &mut self.best {
            Some(lease) if lease.checkpoint() == name => return Ok(lease.renew()?),
            _ => {}
        }
        match ctx.checkpoints.acquire_lease(&name, "early-stopping", BEST_LEASE) {
            Ok(lease) => {
                if let Some(old) = self.best.replace(lease) {
                    old.release()?;
                }
            }
            Err(e) => log::warn!(
                "EarlyStopping cannot keep {name}, the best {} so far, for restore_best_weights: {e}; raise \
                 keep_checkpoint_max so that it outlives its evaluation",
                self.metric
            ),
        }
        Ok(())
    }

    /// Whether the condition holds for a history, at training step `now`.
    pub fn should_stop(&self, history: &[(u64, f64)], now: u64) -> bool {
        let Some(&(last_step, last)) = history.last() else { return false };
        if now < self.min_steps {
            return false;
        }
        let since_best = || last_step.saturating_sub(self.best_step(history).unwrap_or(last_step));
        match self.condition {
            StopCondition::Higher { threshold } => last > threshold,
            StopCondition::Lower { threshold } => last < threshold,
            StopCondition::NoDecrease { max_steps_without_decrease } => since_best() > max_steps_without_decrease,
            StopCondition::NoIncrease { max_steps_without_increase } => since_best() > max_steps_without_increase,
        }
    }
}

impl SessionRunHook for EarlyStoppingHook {
    fn name(&self) -> &str {
        "EarlyStoppingHook"
    }
    fn changes_variables(&self) -> bool {
        self.restore_best_weights
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, _: &RunValues) -> Result<()> {
        if !ctx.global_step.is_multiple_of(self.run_every_steps) {
            return Ok(());
        }
        let history = eval_history(ctx, &self.eval_dir, &self.metric)?;
        let best = self.best_step(&history).filter(|_| self.restore_best_weights);
        if let Some(step) = best
            && ctx.is_chief
        {
            self.lease_best(ctx, step)?;
        }
        if self.should_stop(&history, ctx.global_step) {
            log::info!("Early stopping at step {}: {} {}", ctx.global_step, self.metric, self.condition);
            ctx.request_stop();
            if let Some(step) = best {
                let value = history.iter().find(|p| p.0 == step).map_or(f64::NAN, |p| p.1);
                log::info!("Restoring the best weights: model.ckpt-{step}, {} {value}", self.metric);
                ctx.request_restore(step);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_follow_tensorflow() {
        let h = |c| EarlyStoppingHook::new("loss", c, "eval", 0, 1);
        let falling = [(100, 1.0), (200, 0.8), (300, 0.9), (400, 0.85)];
        assert!(h(StopCondition::NoDecrease { max_steps_without_decrease: 150 }).should_stop(&falling, 400));
        assert!(!h(StopCondition::NoDecrease { max_steps_without_decrease: 250 }).should_stop(&falling, 400));
        assert!(h(StopCondition::Lower { threshold: 0.86 }).should_stop(&falling, 400));
        assert!(!h(StopCondition::Higher { threshold: 0.9 }).should_stop(&falling, 400));
        let rising = [(100, 0.5), (200, 0.9)];
        assert!(h(StopCondition::Higher { threshold: 0.85 }).should_stop(&rising, 200));
        assert!(!h(StopCondition::NoIncrease { max_steps_without_increase: 50 }).should_stop(&rising, 200));
        let mut min = h(StopCondition::Lower { threshold: 2.0 });
        min.min_steps = 500;
        assert!(!min.should_stop(&falling, 400));
    }
}
