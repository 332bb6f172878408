//! Keras' `ReduceLROnPlateau` for Estimator training: when the evaluation metric has not
//! improved for `patience` evaluations, the learning rate is multiplied by `factor`.
//!
//! The rate is [`LearningRate::ReducedOnPlateau`](engine_graph::optimizer::LearningRate):
//! the schedule times the variable `learning_rate_scale`, which this hook assigns. The
//! scale is replayed from the whole evaluation history at every check, with Keras' rule,
//! so it is a function of the events in the model dir: a resumed run, or a hook checking
//! less often, arrives at the same scale as an uninterrupted one.

use super::{HookContext, RunValues, SessionRunHook, early_stopping::eval_history};
use crate::Result;
use engine_graph::{HostTensor, optimizer::LEARNING_RATE_SCALE};

/// Whether a lower or a higher value of the metric is an improvement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monitor {
    Min,
    Max,
}

impl Monitor {
    /// Keras' `mode: "auto"`, widened to the metrics named here: higher is better for
    /// accuracies, AUC, precision and recall, lower for everything else (losses, errors).
    pub fn auto(metric: &str) -> Monitor {
        let m = metric.to_ascii_lowercase();
        if ["accuracy", "acc", "auc", "precision", "recall"].iter().any(|k| m.contains(k)) {
            Monitor::Max
        } else {
            Monitor::Min
        }
    }
}

/// The smallest scale assigned: below it an f32 rate is denormal, and `min_lr` applies long
/// before anyway.
const SMALLEST_SCALE: f64 = 1e-30;

pub struct ReduceLrOnPlateauHook {
    metric: String,
    monitor: Monitor,
    factor: f64,
    /// Evaluations without improvement before the rate is reduced.
    patience: u32,
    /// How much better than the best a value must be to count as an improvement.
    min_delta: f64,
    /// Evaluations after a reduction during which no further one is counted.
    cooldown: u32,
    eval_dir: String,
    run_every_steps: u64,
    /// The scale this hook last assigned.
    assigned: Option<f64>,
}

impl ReduceLrOnPlateauHook {
    /// Keras' defaults for what is not given here: `min_delta` 1e-4, no cooldown; the
    /// metric's direction from its name ([`Monitor::auto`]).
    pub fn new(metric: &str, factor: f64, patience: u32) -> Self {
        ReduceLrOnPlateauHook {
            metric: metric.into(),
            monitor: Monitor::auto(metric),
            factor,
            patience,
            min_delta: 1e-4,
            cooldown: 0,
            eval_dir: "eval".into(),
            run_every_steps: 100,
            assigned: None,
        }
    }

    pub fn monitor(mut self, monitor: Monitor) -> Self {
        self.monitor = monitor;
        self
    }

    pub fn min_delta(mut self, min_delta: f64) -> Self {
        self.min_delta = min_delta;
        self
    }

    pub fn cooldown(mut self, cooldown: u32) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// `eval` or `eval_<name>`, as evaluation writes it.
    pub fn eval_dir(mut self, eval_dir: &str) -> Self {
        self.eval_dir = eval_dir.into();
        self
    }

    pub fn run_every_steps(mut self, steps: u64) -> Self {
        self.run_every_steps = steps.max(1);
        self
    }

    /// How many reductions the history calls for: Keras' `on_epoch_end`, one evaluation at
    /// a time.
    pub fn reductions(&self, history: &[(u64, f64)]) -> u32 {
        let mut best: Option<f64> = None;
        let (mut wait, mut cooling, mut reductions) = (0u32, 0u32, 0u32);
        for &(_, value) in history {
            if cooling > 0 {
                cooling -= 1;
                wait = 0;
            }
            let improved = match (best, self.monitor) {
                (None, _) => true,
                (Some(b), Monitor::Min) => value < b - self.min_delta,
                (Some(b), Monitor::Max) => value > b + self.min_delta,
            };
            if improved {
                best = Some(value);
                wait = 0;
            } else if cooling == 0 {
                wait += 1;
                if wait >= self.patience {
                    reductions += 1;
                    cooling = self.cooldown;
                    wait = 0;
                }
            }
        }
        reductions
    }

    /// The scale after `reductions`.
    pub fn scale(&self, reductions: u32) -> f64 {
        self.factor.powi(reductions as i32).max(SMALLEST_SCALE)
    }
}

impl SessionRunHook for ReduceLrOnPlateauHook {
    fn name(&self) -> &str {
        "ReduceLROnPlateau"
    }

    fn changes_variables(&self) -> bool {
        true
    }

    fn after_run(&mut self, ctx: &HookContext<'_>, _: &RunValues) -> Result<()> {
        if !ctx.global_step.is_multiple_of(self.run_every_steps) {
            return Ok(());
        }
        let history = eval_history(ctx, &self.eval_dir, &self.metric)?;
        let reductions = self.reductions(&history);
        let scale = self.scale(reductions);
        if self.assigned == Some(scale) {
            return Ok(());
        }
        // The first check assigns what the history says, which on a resumed run is what
        // the checkpoint already holds; only a change is worth a line.
        if self.assigned.is_some() || reductions > 0 {
            log::info!(
                "ReduceLROnPlateau at step {}: {} did not improve for {} evaluation(s); the learning rate is now \
                 {scale:.3e} times the schedule's ({reductions} reduction(s) by {})",
                ctx.global_step,
                self.metric,
                self.patience,
                self.factor
            );
        }
        ctx.request_assign(LEARNING_RATE_SCALE, HostTensor::scalar_f32(scale as f32));
        self.assigned = Some(scale);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(values: &[f64]) -> Vec<(u64, f64)> {
        values.iter().enumerate().map(|(i, v)| (i as u64 * 10, *v)).collect()
    }

    /// The sequences below, run through Keras 2.15's `ReduceLROnPlateau.on_epoch_end`
    /// by hand, reduce at the evaluations marked.
    #[test]
    fn reductions_follow_keras() {
        let h = ReduceLrOnPlateauHook::new("loss", 0.5, 2);
        // 1.0 best; 1.0 and 1.1 wait 1, 2 -> reduce; 0.9 improves; 0.95, 0.95 -> reduce.
        assert_eq!(h.reductions(&points(&[1.0, 1.0, 1.1, 0.9, 0.95, 0.95])), 2);
        assert_eq!(h.reductions(&points(&[1.0, 0.9, 0.8, 0.7])), 0);
        // min_delta: 0.99995 is not better than 1.0 by 1e-4.
        assert_eq!(h.reductions(&points(&[1.0, 0.99995, 0.99995])), 1);
        // Cooldown 2: the evaluation after a reduction does not count (Keras decrements the
        // counter before it looks, so a cooldown of 1 skips none).
        let c = ReduceLrOnPlateauHook::new("loss", 0.5, 1).cooldown(2);
        assert_eq!(c.reductions(&points(&[1.0, 1.0, 1.0, 1.0, 1.0])), 2);
        let one = ReduceLrOnPlateauHook::new("loss", 0.5, 1).cooldown(1);
        assert_eq!(one.reductions(&points(&[1.0, 1.0, 1.0, 1.0, 1.0])), 4);
        let no_cooldown = ReduceLrOnPlateauHook::new("loss", 0.5, 1);
        assert_eq!(no_cooldown.reductions(&points(&[1.0, 1.0, 1.0, 1.0, 1.0])), 4);
        // Accuracy: higher is better.
        let acc = ReduceLrOnPlateauHook::new("accuracy", 0.1, 1);
        assert_eq!(acc.monitor, Monitor::Max);
        assert_eq!(acc.reductions(&points(&[0.5, 0.6, 0.55])), 1);
        assert_eq!(h.scale(3), 0.125);
        assert_eq!(h.scale(1000), SMALLEST_SCALE);
    }
}
