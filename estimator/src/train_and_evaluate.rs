//! `train_and_evaluate`: train, evaluating each new checkpoint, with TensorFlow's local
//! semantics (evaluate after a save when `throttle_secs` allow, and always at the end)
//! and, in addition, an explicit schedule (`every_n_steps`), since a time-only throttle
//! makes evaluation points depend on machine speed (TensorFlow #21896).

use crate::{
    CheckpointTrigger, Estimator, EvalResult, EvalSpec, Evaluator, Exporter, Result, StepLimit, TrainSpec,
    checkpoint::{CheckpointInfo, read_checkpoint},
    hooks::{CheckpointSaverListener, HookContext},
    train_eval_spec::run_exporters,
};
use std::time::{Duration, Instant};

struct EvaluateAfterSave<'e> {
    evaluator: Evaluator<'e>,
    estimator: &'e Estimator,
    exporters: &'e mut Vec<Box<dyn Exporter>>,
    throttle: Duration,
    every_n_steps: Option<u64>,
    last_time: Option<Instant>,
    last_step: Option<u64>,
    last_result: &'e mut Option<EvalResult>,
    /// An evaluation at this step is the final one, whatever triggered it (TensorFlow's
    /// `is_the_final_export`): a schedule that lands on it leaves no evaluation to run after.
    max_steps: Option<u64>,
}

impl EvaluateAfterSave<'_> {
    fn due(&self, step: u64) -> bool {
        // A preempted run saves its final step and leaves: evaluating it is the next run's.
        if crate::preemption::requested().is_some() {
            return false;
        }
        match (self.every_n_steps, self.last_step) {
            (_, Some(last)) if last == step => false,
            // Multiples of n, so that a resumed run evaluates at the same steps as an
            // unbroken one (counting from the resume step would shift them).
            (Some(n), _) => step > 0 && step.is_multiple_of(n.max(1)),
            (None, _) => step > 0 && self.last_time.is_none_or(|t| t.elapsed() >= self.throttle),
        }
    }

    fn evaluate(&mut self, path: &str, step: u64, is_final: bool) -> Result<()> {
        let checkpoint =
            read_checkpoint(&self.estimator.model_dir().url_of(path), self.estimator.config().s3.as_ref())?;
        let result = self.evaluator.evaluate(&checkpoint)?;
        let is_final = is_final || self.max_steps.is_some_and(|m| step >= m);
        run_exporters(self.exporters, self.estimator, path, &result, is_final)?;
        self.last_time = Some(Instant::now());
        self.last_step = Some(step);
        *self.last_result = Some(result);
        Ok(())
    }
}

impl CheckpointSaverListener for EvaluateAfterSave<'_> {
    fn after_save(&mut self, _ctx: &HookContext<'_>, step: u64, checkpoint: &CheckpointInfo) -> Result<bool> {
        if self.due(step) {
            self.evaluate(&checkpoint.path, step, false)?;
        }
        Ok(false)
    }
}

/// Trains to `train_spec.max_steps`, evaluating new checkpoints as `eval_spec` says, and
/// returns the final evaluation (always run for the final step).
pub fn train_and_evaluate(
    estimator: &Estimator,
    mut train_spec: TrainSpec,
    mut eval_spec: EvalSpec,
) -> Result<EvalResult> {
    if let Some(cluster) = estimator.train_strategy().cluster().cloned() {
        return crate::distributed::run(estimator, train_spec, eval_spec, &cluster);
    }
    log::info!(
        "Start train and evaluate loop. Evaluation happens {}.",
        match eval_spec.every_n_steps {
            Some(n) => format!("every {n} steps"),
            None => format!("after checkpoints, at most every {} s", eval_spec.throttle_secs),
        }
    );
    let evaluator = estimator.evaluator(
        eval_spec.input_fn.as_ref(),
        eval_spec.steps,
        std::mem::take(&mut eval_spec.hooks),
        eval_spec.name.as_deref(),
    )?;
    let mut last_result = None;
    let mut exporters = std::mem::take(&mut eval_spec.exporters);
    let trigger = match eval_spec.every_n_steps {
        // An explicit schedule needs checkpoints at (at least) those steps.
        Some(n) => match estimator.config().checkpoint_trigger() {
            CheckpointTrigger::Steps(s) => CheckpointTrigger::Steps(gcd(s, n)),
            CheckpointTrigger::Secs(_) => CheckpointTrigger::Steps(n),
        },
        None => estimator.config().checkpoint_trigger(),
    };
    let max_steps = train_spec.last_step(estimator)?;
    let final_step;
    let (last_step, last_path) = {
        let mut listener = EvaluateAfterSave {
            evaluator,
            estimator,
            exporters: &mut exporters,
            throttle: Duration::from_secs(eval_spec.throttle_secs),
            every_n_steps: eval_spec.every_n_steps,
            last_time: None,
            last_step: None,
            last_result: &mut last_result,
            max_steps,
        };
        let limit = match max_steps {
            Some(m) => StepLimit::MaxSteps(m),
            None => StepLimit::UntilInputEnds,
        };
        let hooks = std::mem::take(&mut train_spec.hooks);
        let outcome = {
            let listeners: Vec<Box<dyn CheckpointSaverListener + '_>> = vec![Box::new(ListenerRef(&mut listener))];
            estimator.train_with(train_spec.input_fn.as_ref(), hooks, limit, listeners, trigger)?
        };
        final_step = outcome.global_step;
        let latest = estimator.checkpoints().latest()?;
        if let Some(ckpt) = &latest
            && listener.last_step != Some(ckpt.step)
        {
            // The final evaluation, always (TensorFlow evaluates the last checkpoint even if
            // the throttle would skip it).
            listener.evaluate(&ckpt.path, ckpt.step, true)?;
        }
        (listener.last_step, latest.map(|c| c.path))
    };
    match (last_step, last_path) {
        (Some(step), Some(path)) => {
            log::info!("Training finished at step {final_step}; last evaluation: {path} (step {step})")
        }
        _ => log::info!("Training finished at step {final_step}; no checkpoint was evaluated"),
    }
    last_result.ok_or(crate::EstimatorError::NoCheckpoint("evaluate"))
}

/// Lends a listener to the saver hook for the duration of training.
struct ListenerRef<'a, 'e>(&'a mut EvaluateAfterSave<'e>);

impl CheckpointSaverListener for ListenerRef<'_, '_> {
    fn after_save(&mut self, ctx: &HookContext<'_>, step: u64, checkpoint: &CheckpointInfo) -> Result<bool> {
        self.0.after_save(ctx, step, checkpoint)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a.max(1) } else { gcd(b, a % b) }
}
