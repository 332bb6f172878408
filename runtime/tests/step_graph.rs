//! A steady-state step on a device is recorded once and replayed as one captured graph
//! (`executor/replay.rs`): on each device of `ENGINE_TEST_DEVICES` (`wgpu:0`, lavapipe),
//! a replayed run computes what an eager run of the same steps computes, reads the device
//! back once per step, refreshes its feeds every step, commits nothing on a step that saw a
//! NaN (and names the culprit), and goes back to watching when the store's variables are
//! replaced under it (a restore). Each test also drives the steps as the estimator's
//! loop does on a device, launching step k+1 before it reads step k's end
//! (`Executor::launch`), and finds the same results.

use anyhow::{Context, Result, anyhow, ensure};
use engine_graph::{
    DType, Graph, GraphBuilder, HostTensor, Initializer, Outlet, Plan, Shape,
    autodiff::Autodiff,
    optimizer::{ApplyOptimizer, Optimizer, OptimizerConfig},
    passes::{CheckNumericsPass, Pass},
};
use engine_runtime::{
    Device, Executor, Launched, Precision, RunOptions, StepOutput, VariableStore, device_reads, launched_steps,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A small classifier trained by Adam: `softmax(relu(x · w1 + b1) · w2)` against integer
/// labels (with dropout after the relu, whose mask changes every step, where asked), with the numerics checks, so a step has feeds of two types, several variables
/// with optimizer slots, an integer counter and a loss to fetch.
fn training_plan(dropout: bool) -> Result<(Plan, Outlet, Outlet, Outlet)> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[4]))?;
    let labels = b.placeholder("labels", DType::I64, Shape::batched(&[]))?;
    let w1 = b.variable("w1", &[4, 8], Initializer::GlorotUniform, true)?;
    let b1 = b.variable("b1", &[8], Initializer::Zeros, true)?;
    let w2 = b.variable("w2", &[8, 3], Initializer::GlorotUniform, true)?;
    let h = b.matmul(x, w1)?;
    let h = b.add(h, b1)?;
    let mut h = b.relu(h)?;
    if dropout {
        h = b.dropout(h, 0.4, 11)?;
    }
    let logits = b.matmul(h, w2)?;
    let loss = b.sparse_softmax_cross_entropy(logits, labels)?;
    let loss = b.reduce_mean(loss, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("x".into(), x);
    g.roles.inputs.insert("labels".into(), labels);
    let (plan, train_op) = trained(g, OptimizerConfig::adam(0.05))?;
    Ok((plan, loss, train_op, logits))
}

/// `g`'s gradients, `config`'s updates and the numerics checks, as a plan, and the train op.
fn trained(mut g: Graph, config: OptimizerConfig) -> Result<(Plan, Outlet)> {
    Autodiff.run(&mut g)?;
    ApplyOptimizer { config }.run(&mut g)?;
    CheckNumericsPass.run(&mut g)?;
    let train_op = g.roles.train_op.ok_or_else(|| anyhow!("no train op"))?;
    Ok((Plan::new(g, vec![])?, train_op))
}

/// Step `step`'s batch of 6: different values every step, so a replay that kept reading
/// the recorded step's feeds would show.
fn feeds(step: usize, nan: bool, batch: usize) -> Result<BTreeMap<String, HostTensor>> {
    let mut x: Vec<f32> = (0..4 * batch).map(|i| (((i * 7 + step * 13) % 17) as f32 - 8.0) / 5.0).collect();
    if nan {
        x[5] = f32::NAN;
    }
    let labels = (0..batch).map(|i| ((i + step) % 3) as i64).collect();
    Ok(BTreeMap::from([
        ("x".to_string(), HostTensor::f32(vec![batch, 4], x)?),
        ("labels".to_string(), HostTensor::new(vec![batch], engine_graph::HostData::I64(labels))?),
    ]))
}

/// The tests of this binary run one at a time: the device read counter is process-wide.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn devices() -> Result<Vec<Device>> {
    std::env::var("ENGINE_TEST_DEVICES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|name| Ok(Device::open(name.trim().parse()?)?))
        .collect()
}

/// How a run goes besides its steps: `nan_at`, the step whose input holds a NaN;
/// `restore_at`, the step before which the variables are exported and restored, as a
/// checkpoint restore replaces them; `log_every`, the steps that also fetch the logits (a
/// logging step); `profile_at`, a profiled step (run op by op).
#[derive(Default, Clone, Copy)]
struct Plot {
    nan_at: Option<usize>,
    restore_at: Option<usize>,
    log_every: Option<usize>,
    profile_at: Option<usize>,
    dropout: bool,
    /// The steps before this one fetch the logits of a batch of 1,400: too large to come
    /// back with the step's read, so their recording is refused.
    big_until: Option<usize>,
}

/// How the steps are driven: one at a time (`ahead` off), or as the estimator's loop runs
/// them on a device: step k+1 launched with step k's fetches before step k's end is read,
/// and committed when its turn comes with the same fetches (else dropped and run in turn).
#[derive(Default)]
struct Driver {
    ahead: bool,
    next: Option<(BTreeMap<String, HostTensor>, Option<Launched>)>,
}

impl Driver {
    fn step(
        &mut self,
        exec: &Executor,
        vars: &mut VariableStore,
        feeds: impl Fn(usize) -> Result<BTreeMap<String, HostTensor>>,
        fetches: &[Outlet],
        options: RunOptions,
    ) -> Result<StepOutput> {
        let step = options.step as usize;
        if !self.ahead {
            return Ok(exec.run(vars, &feeds(step)?, fetches, options)?);
        }
        let (fed, launched) = match self.next.take() {
            Some(next) => next,
            None => (feeds(step)?, None),
        };
        let launch_next = |vars: &VariableStore| -> Result<_> {
            let fed = feeds(step + 1)?;
            let launched = exec.launch(vars, &fed, fetches, RunOptions { step: options.step + 1, ..options })?;
            Ok(Some((fed, launched)))
        };
        match launched.filter(|l| l.fetches() == fetches && l.options() == options) {
            Some(mut launched) => {
                exec.commit_launched(vars, &mut launched)?;
                self.next = launch_next(vars)?;
                let finished = exec.finish_launched(vars, launched, &fed)?;
                if finished.rerun {
                    self.replaced();
                }
                Ok(finished.output)
            }
            None => {
                let out = exec.run(vars, &fed, fetches, options)?;
                self.next = launch_next(vars)?;
                Ok(out)
            }
        }
    }

    /// The variables changed under the launched step: it is dropped, its feeds kept.
    fn replaced(&mut self) {
        if let Some(next) = &mut self.next {
            next.1 = None;
        }
    }
}

/// Each step's loss (and logits where fetched), and the variables after the last one.
struct Run {
    losses: Vec<Option<f32>>,
    logits: Vec<Vec<f32>>,
    vars: BTreeMap<String, HostTensor>,
    replayed: u64,
    queued: u64,
    /// Steps committed after being launched ahead.
    launched: u64,
    reads: Vec<u64>,
    culprits: Vec<(usize, String)>,
    refused: Option<String>,
}

fn train(device: &Device, graph: bool, ahead: bool, steps: usize, plot: Plot) -> Result<Run> {
    let (plan, loss, train_op, logits) = training_plan(plot.dropout)?;
    let exec = Executor::new(Arc::new(plan), device.clone(), Precision::F32)?.with_step_graph(graph);
    let mut vars = VariableStore::new();
    exec.initialize(&mut vars, 7)?;
    let mut driver = Driver { ahead, next: None };
    let launched_before = launched_steps();
    let mut run = Run {
        losses: Vec::new(),
        logits: Vec::new(),
        vars: BTreeMap::new(),
        replayed: 0,
        queued: 0,
        launched: 0,
        reads: Vec::new(),
        culprits: Vec::new(),
        refused: None,
    };
    for step in 0..steps {
        if plot.restore_at == Some(step) {
            let saved = vars.export()?;
            for (name, value) in &saved {
                vars.set(name, engine_runtime::Value::from_host(value, device.dispatch(), Precision::F32));
            }
            driver.replaced();
        }
        let mut fetches = vec![loss, train_op];
        if plot.log_every.is_some_and(|n| step % n == 0) || plot.big_until.is_some_and(|n| step < n) {
            fetches.push(logits);
        }
        let options = RunOptions { profile: plot.profile_at == Some(step), step: step as i64, ..RunOptions::default() };
        let before = device_reads();
        let batch = if plot.big_until.is_some() { 1400 } else { 6 };
        let fed = |s: usize| feeds(s, plot.nan_at == Some(s), batch);
        let out = driver.step(&exec, &mut vars, fed, &fetches, options)?;
        run.reads.push(device_reads() - before);
        run.losses.push(out.fetched[0].to_host()?.as_f32().and_then(|v| v.first().copied()));
        if let Some(l) = out.fetched.get(2) {
            run.logits.push(l.to_host()?.as_f32().map(<[f32]>::to_vec).unwrap_or_default());
        }
        run.culprits.extend(out.non_finite.iter().map(|n| (step, n.message.clone())));
    }
    run.vars = vars.export()?;
    run.replayed = exec.replayed_steps();
    run.queued = exec.queued_commits();
    run.launched = launched_steps() - launched_before;
    run.refused = exec.step_graph_refused();
    Ok(run)
}

fn close(a: &HostTensor, b: &HostTensor) -> bool {
    let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
    a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + y.abs()))
}

fn same(replayed: &Run, eager: &Run, what: &str) -> Result<()> {
    for (step, (r, e)) in replayed.losses.iter().zip(&eager.losses).enumerate() {
        let (r, e) = (r.context("no loss")?, e.context("no loss")?);
        ensure!(
            (r - e).abs() <= 1e-5 * (1.0 + e.abs()) || (r.is_nan() && e.is_nan()),
            "{what}: step {step}'s loss {r} replayed, {e} eager"
        );
    }
    ensure!(replayed.vars.keys().eq(eager.vars.keys()), "{what}: other variables");
    for (name, value) in &replayed.vars {
        ensure!(close(value, &eager.vars[name]), "{what}: {name} differs after the last step");
    }
    ensure!(
        replayed.culprits == eager.culprits,
        "{what}: {:?} replayed, {:?} eager",
        replayed.culprits,
        eager.culprits
    );
    Ok(())
}

/// Trains `steps` steps on every listed device without step graphs, with them, and with
/// them run ahead; checks the three runs alike, that `replays` steps were replays both
/// ways and that the run ahead committed steps it launched, and returns the replayed runs
/// (one at a time, then run ahead).
fn alike(steps: usize, plot: Plot, replays: u64, what: &str) -> Result<Vec<(Device, Run, Run)>> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut runs = Vec::new();
    for device in devices()? {
        let replayed = train(&device, true, false, steps, plot)?;
        let ahead = train(&device, true, true, steps, plot)?;
        let eager = train(&device, false, false, steps, plot)?;
        same(&replayed, &eager, &format!("{device}, {what}"))?;
        same(&ahead, &eager, &format!("{device}, {what}, run ahead"))?;
        ensure!(eager.replayed == 0 && replayed.launched == 0);
        for (run, how) in [(&replayed, "one at a time"), (&ahead, "run ahead")] {
            ensure!(
                run.replayed == replays,
                "{device}, {what}, {how}: {} steps replayed of {steps} ({:?})",
                run.replayed,
                run.refused
            );
        }
        ensure!(ahead.launched > 0 && ahead.queued == replayed.queued, "{device}, {what}: nothing ran ahead");
        runs.push((device, replayed, ahead));
    }
    Ok(runs)
}

#[test]
fn a_replayed_step_computes_what_the_eager_step_computes() -> Result<()> {
    // Two steps watched, one warmup, then every step is a replay (the first of them the
    // recorded one), each reading the device once.
    for (device, run, ahead) in alike(12, Plot::default(), 9, "12 steps")? {
        ensure!(run.reads[3..].iter().all(|&r| r <= 1), "{device}: device reads per step {:?}", run.reads);
        ensure!(ahead.reads[3..].iter().all(|&r| r <= 1), "{device}: device reads per step {:?}", ahead.reads);
        // The first replay commits from the host and records the guarded copies; every
        // later one queues them behind the step, and runs ahead: launched by the step
        // before, committed when its turn came.
        ensure!(run.queued == 8, "{device}: {} of 9 replays queued their commit", run.queued);
        ensure!(ahead.launched == 8, "{device}: {} of 9 replays ran ahead", ahead.launched);
    }
    Ok(())
}

#[test]
fn a_nan_in_a_replayed_step_commits_nothing_and_names_the_culprit() -> Result<()> {
    // The step after the NaN still replays (the graph is kept, and nothing committed).
    for (device, run, ahead) in alike(10, Plot { nan_at: Some(6), ..Plot::default() }, 7, "a NaN at step 6")? {
        // Step 6's commit was queued before its flag was read: the device skipped it.
        ensure!(run.queued == 6, "{device}: {} of 7 replays queued their commit", run.queued);
        ensure!(
            run.culprits.first().is_some_and(|(step, what)| *step == 6 && what == "gradient of w1"),
            "{device}: {:?}",
            run.culprits
        );
        // Run ahead, step 6 ran again op by op to name the culprit, and step 7 (launched
        // before step 6's end was read) was dropped and ran in turn.
        ensure!(ahead.launched == 5, "{device}: {} steps ran ahead", ahead.launched);
    }
    Ok(())
}

#[test]
fn variables_replaced_under_the_graph_are_read_by_the_next_step() -> Result<()> {
    // Replays at steps 3..=6, then watching again: 7 and 8 watched, 9 the warmup,
    // 10..=13 replays.
    alike(14, Plot { restore_at: Some(7), ..Plot::default() }, 8, "restored before step 7").map(drop)
}

#[test]
fn logging_and_profiled_steps_run_op_by_op_and_keep_the_graph() -> Result<()> {
    // Steps 1-3 watched and warmed, 4 recorded; the steps that fetch the logits (0, 5, 10,
    // 15) and the profiled one (8) run op by op and commit into the variables' buffers, so
    // the graph stays: 4, 6, 7, 9 and 11-14 are replays.
    let plot = Plot { log_every: Some(5), profile_at: Some(8), ..Plot::default() };
    alike(16, plot, 8, "logging every 5 steps, profiling step 8").map(drop)
}

#[test]
fn a_replayed_dropout_draws_each_steps_mask() -> Result<()> {
    alike(10, Plot { dropout: true, ..Plot::default() }, 7, "with dropout").map(drop)
}

#[test]
fn a_step_whose_recording_is_refused_runs_op_by_op_and_the_others_still_replay() -> Result<()> {
    // Steps 0-4 fetch 4,200 logits: watched, warmed, refused at 3 (4 runs op by op without
    // trying again); from 5 the steps fetch the loss only: 5 and 6 watched, 7 warmed, 8-11
    // replays.
    let plot = Plot { big_until: Some(5), ..Plot::default() };
    for (device, run, ahead) in alike(12, plot, 4, "logits too large to read with the step until step 5")? {
        for run in [run, ahead] {
            ensure!(run.refused.as_deref().is_some_and(|r| r.contains("too large")), "{device}: {:?}", run.refused);
        }
    }
    Ok(())
}

/// `v · x` summed, trained by plain SGD, with the numerics checks: `x`'s values are the
/// gradient of `v`, so a feed decides what the step's probes sum to.
fn dot_plan() -> Result<(Plan, Outlet, Outlet)> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[4]))?;
    let v = b.variable("v", &[4], Initializer::Zeros, true)?;
    let p = b.mul(x, v)?;
    let loss = b.reduce_sum(p, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("x".into(), x);
    let (plan, train_op) =
        trained(g, OptimizerConfig::constant(Optimizer::Sgd { momentum: 0.0, nesterov: false }, 0.01))?;
    Ok((plan, loss, train_op))
}

#[test]
fn finite_values_whose_flag_overflows_are_committed() -> Result<()> {
    // Step 5's gradient of v is [3e38, 3e38, 0, 0]: every value finite, their sum (the
    // step's flag) not. The device's guarded copies then copy nothing, and the host, having
    // counted no non-finite value, must commit the step itself, as an eager step does.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for device in devices()? {
        let mut finals = Vec::new();
        // Run ahead, step 5 runs again op by op (the device's flag gives no culprit), which
        // finds every value finite and commits it.
        for (graph, ahead) in [(true, false), (true, true), (false, false)] {
            let (plan, loss, train_op) = dot_plan()?;
            let exec = Executor::new(Arc::new(plan), device.clone(), Precision::F32)?.with_step_graph(graph);
            let mut vars = VariableStore::new();
            exec.initialize(&mut vars, 7)?;
            let mut driver = Driver { ahead, next: None };
            let x = |step: usize| -> Result<BTreeMap<String, HostTensor>> {
                let x = match step {
                    5 => vec![3e38, 3e38, 0.0, 0.0],
                    s if s < 5 => vec![1.0; 4],
                    _ => vec![0.0; 4],
                };
                Ok(BTreeMap::from([("x".to_string(), HostTensor::f32(vec![1, 4], x)?)]))
            };
            for step in 0..9 {
                let options = RunOptions { step, ..RunOptions::default() };
                let out = driver.step(&exec, &mut vars, x, &[loss, train_op], options)?;
                ensure!(out.non_finite.is_empty(), "{device}: step {step}: {:?}", out.non_finite.len());
            }
            let v = vars.export()?.remove("v").context("no v")?.to_f64_vec();
            finals.push((v, exec.replayed_steps(), exec.queued_commits()));
        }
        for (_, replays, queued) in &finals[..2] {
            ensure!(*replays == 6 && *queued == 5, "{device}: {replays} replays, {queued} queued commits");
        }
        let want = -0.05 - 0.01 * 3e38_f64;
        for (v, ..) in &finals {
            ensure!((v[0] - want).abs() <= 1e-5 * want.abs() && (v[2] + 0.05).abs() < 1e-6, "{device}: v {v:?}");
        }
    }
    Ok(())
}
