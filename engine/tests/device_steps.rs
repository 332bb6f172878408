//! A training step on a device, as the estimator runs it: every spec of `specs/`, trained
//! a few steps on each device of `ENGINE_TEST_DEVICES` (CI names `wgpu:0`, lavapipe).
//!
//! - A steady-state step reads back from the device at most once: the numerics flag and
//!   the loss travel in one transfer at the step's end, so the launch queue never drains
//!   inside a step.
//! - A profiled step times each op on the device's clock, and those times account for the
//!   step: the host's own timings there show only the launches.
//!
//! - A run whose loop ran ahead (step k+1 launched before step k's end was read), stopped
//!   and resumed, trains on every batch once: the checkpoint records the input's position
//!   before the batch pulled ahead.
//!
//! The tests of this binary run one at a time: the read counter is process-wide, and
//! another test's reads running beside it would be counted as this one's.

use anyhow::{Context, Result, anyhow, ensure};
use engine_cli::{
    job,
    spec::{Override, Spec},
};
use engine_estimator::{
    Estimator, RunConfig, StepLimit,
    hooks::{HookContext, RunArgs, RunValues, SessionRunHook},
    strategy::StrategyOptions,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const STEPS: u64 = 4;
/// The step the recorder asks to profile: after the first (which compiles the kernels).
const PROFILED: u64 = 3;

/// What the training loop told the hooks about each step.
#[derive(Debug, Clone)]
struct Seen {
    step: u64,
    reads: Option<u64>,
    step_time: Duration,
    /// `(op, node, device time)` of each op, on the profiled step.
    ops: Vec<(&'static str, String, Option<Duration>)>,
}

struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl SessionRunHook for Recorder {
    fn name(&self) -> &str {
        "Recorder"
    }
    fn before_run(&mut self, ctx: &HookContext<'_>) -> engine_estimator::Result<RunArgs> {
        Ok(RunArgs { fetches: Vec::new(), profile: ctx.global_step + 1 == PROFILED })
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, values: &RunValues) -> engine_estimator::Result<()> {
        let ops = values.timings.iter().map(|t| (t.op, t.node.clone(), t.device.map(|d| d.duration))).collect();
        if let Ok(mut seen) = self.0.lock() {
            seen.push(Seen { step: ctx.global_step, reads: values.device_reads, step_time: values.step_time, ops });
        }
        Ok(())
    }
}

/// An estimator of spec `name` at batch 8 on `device`, writing summaries every
/// `save_summary_steps` steps (0: never).
fn estimator(name: &str, device: &str, model_dir: &str, save_summary_steps: u64) -> Result<(Arc<Spec>, Estimator)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../specs/fashion_mnist_{name}.ron"));
    let spec = Arc::new(Spec::from_file(&path, &[Override::parse("train_input.batch_size=8")?])?);
    let config = RunConfig {
        model_dir: model_dir.into(),
        random_seed: Some(7),
        strategy: StrategyOptions { device: device.parse()?, ..StrategyOptions::default() },
        save_summary_steps,
        log_step_count_steps: 1000,
        ..RunConfig::default()
    };
    Ok((spec.clone(), Estimator::new(job::SpecModelFn::new(spec, 7), config)?))
}

fn train(name: &str, device: &str) -> Result<Vec<Seen>> {
    let (spec, estimator) = estimator(name, device, &format!("memory://device-steps-{name}/model"), 0)?;
    let input = job::train_input_fn(&spec)?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let outcome = estimator.train(
        input.as_ref(),
        vec![Box::new(Recorder(seen.clone()))],
        StepLimit::MaxSteps(STEPS),
        Vec::new(),
    )?;
    ensure!(outcome.global_step == STEPS, "stopped at step {}", outcome.global_step);
    let seen = seen.lock().map_err(|_| anyhow!("the recorder panicked"))?.clone();
    Ok(seen)
}

/// Checks one spec's steps; returns the profiled step's device time over its step time,
/// and that device time.
fn check(name: &str, device: &str, seen: &[Seen]) -> Result<(f64, Duration)> {
    ensure!(seen.len() == STEPS as usize, "{name} on {device}: {} steps seen", seen.len());
    for s in seen.iter().skip(1) {
        let reads = s.reads.ok_or_else(|| anyhow!("{name} on {device}: step {} counted no reads", s.step))?;
        ensure!(reads <= 1, "{name} on {device}: step {} read the device back {reads} times", s.step);
    }
    let profiled = seen.iter().find(|s| !s.ops.is_empty()).ok_or_else(|| anyhow!("{name}: no step was profiled"))?;
    let timed: Vec<_> = profiled.ops.iter().filter_map(|(op, node, d)| Some((*op, node, (*d)?))).collect();
    // Every op that computes launches kernels, and each must show its device time.
    for (op, node, d) in &profiled.ops {
        if matches!(*op, "MatMul" | "_FusedMatMul" | "Conv2D" | "_FusedConv2D" | "SparseSoftmaxCrossEntropyWithLogits")
        {
            ensure!(d.is_some(), "{name} on {device}: {op} '{node}' has no device time");
        }
    }
    ensure!(!timed.is_empty(), "{name} on {device}: no op has a device time");
    let device_time: Duration = timed.iter().map(|t| t.2).sum();
    let ratio = device_time.as_secs_f64() / profiled.step_time.as_secs_f64().max(1e-9);
    // The device runs the ops one after another, so their times cannot exceed the step
    // (10% for the clocks' rounding and the windows' own cost).
    ensure!(
        ratio <= 1.1,
        "{name} on {device}: ops took {device_time:?} on the device in a step of {:?}",
        profiled.step_time
    );
    Ok((ratio, device_time))
}

/// The devices of `ENGINE_TEST_DEVICES`, with the repository's root as the working
/// directory (the specs name their data relative to it: the table spec's CSV).
fn devices() -> Result<Vec<String>> {
    let listed = std::env::var("ENGINE_TEST_DEVICES").unwrap_or_default();
    let devices: Vec<String> = listed.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    if devices.is_empty() {
        eprintln!("ENGINE_TEST_DEVICES names no device: nothing to check (CI names wgpu:0)");
    }
    std::env::set_current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))?;
    Ok(devices)
}

#[test]
fn device_steps_read_back_once_and_profile_on_the_device() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let devices = devices()?;
    let specs = ["cnn", "mlp", "png", "residual", "resnet", "table", "vgg", "vit"];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../specs");
    let files = std::fs::read_dir(&dir)?.count();
    ensure!(files == specs.len(), "specs/ has {files} files, this test trains {specs:?}: add the new one");
    let mut covered = Vec::new();
    for device in &devices {
        for name in specs {
            let seen = train(name, device).with_context(|| format!("{name} on {device}"))?;
            let (ratio, device_time) = check(name, device, &seen)?;
            let reads: Vec<String> = seen.iter().map(|s| format!("{:?}", s.reads.unwrap_or(0))).collect();
            let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
            let plain: Vec<String> =
                seen.iter().skip(1).filter(|s| s.ops.is_empty()).map(|s| ms(s.step_time)).collect();
            eprintln!(
                "{name} on {device}: device reads per step {}; its ops ran {} ms on the device, {:.0}% of the \
                 profiled step; unprofiled steps took {} ms",
                reads.join(", "),
                ms(device_time),
                ratio * 100.0,
                plain.join(", ")
            );
            covered.push(ratio);
        }
    }
    // Where the kernels are the step (VGG's convolutions), their device times account for
    // it; a profile that timed only the launches would show a fraction. Small models are
    // bound by the host's launches instead (on lavapipe a quarter to two thirds of the
    // step runs on the device), which is what these times are for.
    let best = covered.iter().copied().fold(0.0, f64::max);
    ensure!(best >= 0.75, "the ops' device times cover at most {:.0}% of a profiled step", best * 100.0);
    Ok(())
}

/// Each step's loss, by global step.
struct Losses(Arc<Mutex<Vec<(u64, f64)>>>);

impl SessionRunHook for Losses {
    fn name(&self) -> &str {
        "Losses"
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, values: &RunValues) -> engine_estimator::Result<()> {
        let loss = values.results.get("loss").and_then(|l| l.scalar_value()).unwrap_or(f64::NAN);
        if let Ok(mut seen) = self.0.lock() {
            seen.push((ctx.global_step, loss));
        }
        Ok(())
    }
}

/// Trains the MLP spec in `model_dir` up to each of `stops` in turn (a run per stop, each
/// resuming from the last one's checkpoint); returns every step's loss.
fn losses(device: &str, model_dir: &str, stops: &[u64]) -> Result<Vec<(u64, f64)>> {
    // A summary step fetches more than the others: the step launched before it is dropped
    // and its batch runs in turn.
    let (spec, estimator) = estimator("mlp", device, model_dir, 5)?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    for &stop in stops {
        let input = job::train_input_fn(&spec)?;
        let hooks: Vec<Box<dyn SessionRunHook>> = vec![Box::new(Losses(seen.clone()))];
        let outcome = estimator.train(input.as_ref(), hooks, StepLimit::MaxSteps(stop), Vec::new())?;
        ensure!(outcome.global_step == stop, "stopped at step {}", outcome.global_step);
    }
    let seen = seen.lock().map_err(|_| anyhow!("the recorder panicked"))?.clone();
    Ok(seen)
}

#[test]
fn a_run_ahead_that_stops_and_resumes_trains_on_every_batch_once() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(device) = devices()?.into_iter().next() else { return Ok(()) };
    let launched = engine_runtime::launched_steps();
    // Stopped at step 9 with step 10's batch pulled and launched, then resumed.
    let resumed = losses(&device, "memory://run-ahead-resumed/model", &[9, 16])?;
    let ran_ahead = engine_runtime::launched_steps() - launched;
    let straight = losses(&device, "memory://run-ahead-straight/model", &[16])?;
    ensure!(ran_ahead > 0, "{device}: no step ran ahead");
    ensure!(resumed.len() == 16 && straight.len() == 16, "{} and {} steps", resumed.len(), straight.len());
    for ((step, a), (_, b)) in resumed.iter().zip(&straight) {
        ensure!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{device}: step {step}'s loss {a} resumed, {b} straight");
    }
    eprintln!("{device}: {ran_ahead} steps ran ahead; the resumed run's 16 losses match the straight run's");
    Ok(())
}
