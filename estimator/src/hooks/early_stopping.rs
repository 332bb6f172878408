//! Early stopping on evaluation results (TensorFlow's `stop_if_no_decrease_hook`,
//! `stop_if_higher_hook`, ...): reads the metric from the evaluation event files every N
//! steps and requests a stop when the condition holds.

use super::{HookContext, RunValues, SessionRunHook};
use crate::{
    Result,
    summary::{event_files, read_event_file},
};

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

pub struct EarlyStoppingHook {
    metric: String,
    condition: StopCondition,
    eval_dir: String,
    min_steps: u64,
    run_every_steps: u64,
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
        }
    }

    /// `(step, value)` of the metric, in step order.
    fn history(&self, ctx: &HookContext<'_>) -> Result<Vec<(u64, f64)>> {
        let mut points = Vec::new();
        for file in event_files(ctx.model_dir, &self.eval_dir)? {
            for event in read_event_file(ctx.model_dir, &file)? {
                let Some(summary) = event.summary else { continue };
                for v in summary.value {
                    if v.tag == self.metric
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

    /// Whether the condition holds for a history, at training step `now`.
    pub fn should_stop(&self, history: &[(u64, f64)], now: u64) -> bool {
        let Some(&(last_step, last)) = history.last() else { return false };
        if now < self.min_steps {
            return false;
        }
        let since_best = |better: fn(f64, f64) -> bool| {
            let mut best = history[0];
            for &(s, v) in history {
                if better(v, best.1) {
                    best = (s, v);
                }
            }
            last_step.saturating_sub(best.0)
        };
        match self.condition {
            StopCondition::Higher { threshold } => last > threshold,
            StopCondition::Lower { threshold } => last < threshold,
            StopCondition::NoDecrease { max_steps_without_decrease } => {
                since_best(|a, b| a < b) > max_steps_without_decrease
            }
            StopCondition::NoIncrease { max_steps_without_increase } => {
                since_best(|a, b| a > b) > max_steps_without_increase
            }
        }
    }
}

impl SessionRunHook for EarlyStoppingHook {
    fn name(&self) -> &str {
        "EarlyStoppingHook"
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, _: &RunValues) -> Result<()> {
        if !ctx.global_step.is_multiple_of(self.run_every_steps) {
            return Ok(());
        }
        let history = self.history(ctx)?;
        if self.should_stop(&history, ctx.global_step) {
            log::info!("Early stopping at step {}: {} {}", ctx.global_step, self.metric, self.condition);
            ctx.request_stop();
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
