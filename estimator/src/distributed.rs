//! `train_and_evaluate` in a cluster, by role, as TensorFlow's distributed executor runs it:
//! the chief and workers train to `max_steps` (only the chief saves); the evaluator task
//! evaluates each new checkpoint as it appears, skipping intermediate ones when behind,
//! and exits once it has evaluated the final step. Without an evaluator task the chief
//! evaluates the final checkpoint itself, after every worker has left the collective, so
//! no worker waits on an evaluation. A ps task serves its variables until training ends.

use crate::{
    Estimator, EvalResult, EvalSpec, Result, StepLimit, TrainSpec, checkpoint::read_checkpoint, strategy::trains,
    train_eval_spec::run_exporters,
};
use engine_runtime::cluster::{Cluster, TaskType};
use std::time::{Duration, Instant};

/// How often the evaluator looks for a new checkpoint.
const POLL: Duration = Duration::from_millis(500);
/// How long the evaluator's lease on the checkpoint it reads lasts (renewed per evaluation).
const LEASE_TTL: Duration = Duration::from_secs(600);

pub(crate) fn run(
    estimator: &Estimator,
    mut train_spec: TrainSpec,
    mut eval_spec: EvalSpec,
    cluster: &Cluster,
) -> Result<EvalResult> {
    if cluster.task().task_type == TaskType::Ps {
        let outcome = estimator.train(
            train_spec.input_fn.as_ref(),
            std::mem::take(&mut train_spec.hooks),
            StepLimit::UntilInputEnds,
            Vec::new(),
        )?;
        log::info!("{cluster}: serving ended at global step {}", outcome.global_step);
        return Ok(EvalResult::from([("global_step".to_string(), outcome.global_step as f64)]));
    }
    let max_steps = train_spec.last_step(estimator)?;
    if !trains(cluster) {
        return continuous_evaluation(estimator, eval_spec, max_steps, cluster);
    }
    let limit = match max_steps {
        Some(m) => StepLimit::MaxSteps(m),
        None => StepLimit::UntilInputEnds,
    };
    let hooks = std::mem::take(&mut train_spec.hooks);
    let outcome = estimator.train(train_spec.input_fn.as_ref(), hooks, limit, Vec::new())?;
    let has_evaluator = !cluster.spec().tasks(TaskType::Evaluator).is_empty();
    if !cluster.is_chief() || has_evaluator {
        log::info!("{cluster}: training finished at step {}", outcome.global_step);
        return Ok(EvalResult::from([("global_step".to_string(), outcome.global_step as f64)]));
    }
    let hooks = std::mem::take(&mut eval_spec.hooks);
    let mut evaluator =
        estimator.evaluator(eval_spec.input_fn.as_ref(), eval_spec.steps, hooks, eval_spec.name.as_deref())?;
    let latest = estimator.checkpoints().latest()?.ok_or(crate::EstimatorError::NoCheckpoint("evaluate"))?;
    let checkpoint = read_checkpoint(&estimator.model_dir().url_of(&latest.path), estimator.config().s3.as_ref())?;
    let result = evaluator.evaluate(&checkpoint)?;
    run_exporters(&mut eval_spec.exporters, estimator, &latest.path, &result, true)?;
    Ok(result)
}

/// TensorFlow's continuous evaluation: wait `start_delay_secs`, then evaluate the latest
/// checkpoint whenever it is new (at most every `throttle_secs`), until one at or past
/// `max_steps` has been evaluated.
fn continuous_evaluation(
    estimator: &Estimator,
    mut eval_spec: EvalSpec,
    max_steps: Option<u64>,
    cluster: &Cluster,
) -> Result<EvalResult> {
    // Lease holders name files: `evaluator-0`, not `evaluator:0`.
    let holder = format!("{}-{}", cluster.task().task_type, cluster.task().index);
    let is_final = |step: u64| max_steps.is_some_and(|m| step >= m);
    if eval_spec.start_delay_secs > 0 {
        log::info!("{holder}: waiting {} s before the first evaluation", eval_spec.start_delay_secs);
        // The delay gives training a head start; once the final checkpoint exists there is
        // nothing to wait for.
        let until = Instant::now() + Duration::from_secs(eval_spec.start_delay_secs);
        while Instant::now() < until {
            stop_if_asked()?;
            if estimator.checkpoints().latest()?.is_some_and(|c| is_final(c.step)) {
                log::info!("{holder}: the final checkpoint exists; evaluating now");
                break;
            }
            std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
        }
    }
    let hooks = std::mem::take(&mut eval_spec.hooks);
    let mut evaluator =
        estimator.evaluator(eval_spec.input_fn.as_ref(), eval_spec.steps, hooks, eval_spec.name.as_deref())?;
    let throttle = Duration::from_secs(eval_spec.throttle_secs);
    let mut last: Option<(u64, Instant, EvalResult)> = None;
    // Checkpoints that could not be read: not retried, the next one is awaited instead.
    let mut unreadable = std::collections::BTreeSet::new();
    loop {
        stop_if_asked()?;
        let latest = estimator.checkpoints().latest()?;
        let newer = |c: &crate::checkpoint::CheckpointInfo| last.as_ref().is_none_or(|(step, _, _)| c.step > *step);
        let Some(info) = latest.filter(|c| newer(c) && !unreadable.contains(&c.path)) else {
            std::thread::sleep(POLL);
            continue;
        };
        if let Some((_, at, _)) = &last
            && !is_final(info.step)
            && at.elapsed() < throttle
        {
            std::thread::sleep(POLL.min(throttle - at.elapsed()));
            continue;
        }
        // The lease keeps the chief's garbage collection off the checkpoint while it is
        // read (TensorFlow #39033); a checkpoint collected before the lease was taken is
        // simply skipped for the next one.
        let lease = match estimator.checkpoints().acquire_lease(&info.path, &holder, LEASE_TTL) {
            Ok(l) => l,
            Err(e) => {
                log::warn!("{holder}: cannot lease {} ({e}); waiting for the next checkpoint", info.path);
                std::thread::sleep(POLL);
                continue;
            }
        };
        let checkpoint =
            match read_checkpoint(&estimator.model_dir().url_of(&info.path), estimator.config().s3.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    log::warn!("{holder}: skipping {} ({e})", info.path);
                    lease.release()?;
                    unreadable.insert(info.path.clone());
                    continue;
                }
            };
        let started = Instant::now();
        let result = evaluator.evaluate(&checkpoint)?;
        lease.release()?;
        let final_one = is_final(info.step);
        run_exporters(&mut eval_spec.exporters, estimator, &info.path, &result, final_one)?;
        if final_one {
            log::info!("{holder}: evaluated the final checkpoint {} (step {})", info.path, info.step);
            return Ok(result);
        }
        last = Some((info.step, started, result));
    }
}

/// A preempted evaluator has nothing to save: it stops at once.
fn stop_if_asked() -> Result<()> {
    match crate::preemption::requested() {
        Some(signal) => Err(crate::EstimatorError::Preempted { signal: Some(signal), step: None }),
        None => Ok(()),
    }
}
