//! Every built-in hook, by its effect on a real training run of a small model: what it
//! logged, wrote, stopped or failed.

mod estimator_common;

use anyhow::{Context, Result, ensure};
use engine_estimator::{
    Estimator, EstimatorError, EstimatorSpec, EvalSpec, Features, Mode, Params, RunConfig, StepLimit, TrainOp,
    TrainSpec,
    checkpoint::{CheckpointInfo, read_checkpoint},
    hooks::{
        CheckpointSaverListener, EarlyStoppingHook, HookContext, LoggingTensorHook, ProfilerHook,
        ReduceLrOnPlateauHook, StepCounterHook, StopAtStepHook, StopCondition, SummarySaverHook,
    },
    model_dir::ModelDir,
    summary::{event_files, read_event_file},
    train_and_evaluate,
};
use engine_graph::{GraphBuilder, Initializer, Outlet, optimizer::LearningRate};
use estimator_common::{config, dir_string, eval_input, linear_estimator, log_lines, sgd, train_input};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// `(tag, step, value)` of every scalar in the event files of `subdir`.
fn scalars(dir: &tempfile::TempDir, subdir: &str) -> Result<Vec<(String, u64, f64)>> {
    let model_dir = ModelDir::open(&dir_string(dir))?;
    let mut out = Vec::new();
    for file in event_files(&model_dir, subdir)? {
        for event in read_event_file(&model_dir, &file)? {
            for v in event.summary.map(|s| s.value).unwrap_or_default() {
                if let Some(x) = v.simple_value {
                    out.push((v.tag, event.step as u64, x as f64));
                }
            }
        }
    }
    Ok(out)
}

fn steps_of(points: &[(String, u64, f64)], tag: &str) -> Vec<u64> {
    points.iter().filter(|p| p.0 == tag).map(|p| p.1).collect()
}

#[test]
fn logging_tensor_hook_fetches_and_logs_a_named_tensor_every_n_steps() -> Result<()> {
    log_lines();
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.0)?;
    // `v` is the feature placeholder: its fetched value is the batch, which tells the steps
    // apart (batches of 4 of v = 0..9, the last 2 dropped, repeated).
    let hook = LoggingTensorHook::new(&["v", "linear/w"], 2);
    estimator.train(&train_input, vec![Box::new(hook)], StepLimit::Steps(4), Vec::new())?;
    let lines: Vec<String> = log_lines().into_iter().filter(|l| l.starts_with("v = ")).collect();
    ensure!(lines.len() == 2, "{lines:#?}");
    ensure!(lines[0].starts_with("v = [0.0, 1.0, 2.0, 3.0], linear/w = [0.25, 0.25], step = 0"), "{}", lines[0]);
    ensure!(lines[1].starts_with("v = [0.0, 1.0, 2.0, 3.0], linear/w = [0.25, 0.25], step = 2"), "{}", lines[1]);
    Ok(())
}

#[test]
fn stop_at_step_hook_stops_an_unbounded_run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.1)?;
    let out =
        estimator.train(&train_input, vec![Box::new(StopAtStepHook::at(7))], StepLimit::UntilInputEnds, Vec::new())?;
    ensure!(out.global_step == 7, "{out:?}");
    // The final checkpoint records where it stopped.
    ensure!(estimator.latest_checkpoint()?.as_deref() == Some("model.ckpt-7"));
    Ok(())
}

/// Records the saves it sees and asks to stop at `stop_at`.
struct StopAfter {
    stop_at: u64,
    seen: Arc<Mutex<Vec<String>>>,
}

impl CheckpointSaverListener for StopAfter {
    fn before_save(&mut self, _: &HookContext<'_>, step: u64) -> engine_estimator::Result<()> {
        self.seen.lock().map_err(|_| EstimatorError::Other("poisoned".into()))?.push(format!("before {step}"));
        Ok(())
    }
    fn after_save(
        &mut self,
        _: &HookContext<'_>,
        step: u64,
        checkpoint: &CheckpointInfo,
    ) -> engine_estimator::Result<bool> {
        self.seen
            .lock()
            .map_err(|_| EstimatorError::Other("poisoned".into()))?
            .push(format!("after {step} {}", checkpoint.path));
        Ok(step >= self.stop_at)
    }
    fn end(&mut self, _: &HookContext<'_>, step: u64) -> engine_estimator::Result<()> {
        self.seen.lock().map_err(|_| EstimatorError::Other("poisoned".into()))?.push(format!("end {step}"));
        Ok(())
    }
}

#[test]
fn checkpoint_saver_listener_sees_every_save_and_can_stop_training() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 5, 0.1)?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = StopAfter { stop_at: 10, seen: seen.clone() };
    let out = estimator.train(&train_input, Vec::new(), StepLimit::MaxSteps(100), vec![Box::new(listener)])?;
    ensure!(out.global_step == 10, "{out:?}");
    let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    let want = [
        "before 0",
        "after 0 model.ckpt-0",
        "before 5",
        "after 5 model.ckpt-5",
        "before 10",
        "after 10 model.ckpt-10",
        "end 10",
    ];
    ensure!(seen == want, "{seen:#?}");
    let steps: Vec<u64> = estimator.checkpoints().list()?.iter().map(|c| c.step).collect();
    ensure!(steps == [0, 5, 10], "{steps:?}");
    Ok(())
}

#[test]
fn step_counter_hook_reports_steps_and_examples_per_second() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // save_summary_steps > 0 gives the session a summary writer; log_step_count_steps = 1000
    // keeps the built-in counter quiet, so every report is this hook's.
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.1)?;
    estimator.train(&train_input, vec![Box::new(StepCounterHook::new(5))], StepLimit::Steps(20), Vec::new())?;
    let points = scalars(&dir, "")?;
    ensure!(steps_of(&points, "global_step/sec") == [5, 10, 15, 20], "{points:?}");
    ensure!(steps_of(&points, "examples/sec") == [5, 10, 15, 20], "{points:?}");
    for step in [5, 10, 15, 20] {
        let at = |tag: &str| points.iter().find(|p| p.0 == tag && p.1 == step).map(|p| p.2).unwrap_or(f64::NAN);
        let (steps_per_sec, examples_per_sec) = (at("global_step/sec"), at("examples/sec"));
        ensure!(steps_per_sec > 0.0, "{steps_per_sec}");
        // Batches of 4 examples (f32 summaries: compare relatively).
        ensure!((examples_per_sec / steps_per_sec - 4.0).abs() < 1e-3, "{examples_per_sec} / {steps_per_sec}");
        let waiting = at("input_wait_fraction");
        ensure!((0.0..=1.0).contains(&waiting), "{waiting}");
    }
    Ok(())
}

#[test]
fn summary_saver_hook_writes_scalars_and_histograms_every_n_steps() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.1)?;
    estimator.train(&train_input, vec![Box::new(SummarySaverHook::new(4, true))], StepLimit::Steps(10), Vec::new())?;
    let points = scalars(&dir, "")?;
    // Step 0 is also the built-in saver's (save_summary_steps = 1000); the hook's are 0, 4, 8.
    let mut loss_steps = steps_of(&points, "loss");
    loss_steps.dedup();
    ensure!(loss_steps == [0, 4, 8], "{points:?}");
    ensure!(steps_of(&points, "learning_rate").contains(&8), "{points:?}");
    ensure!(points.iter().any(|p| p.0 == "learning_rate" && (p.2 - 0.1).abs() < 1e-7));
    let model_dir = ModelDir::open(&dir_string(&dir))?;
    let mut histograms = Vec::new();
    for file in event_files(&model_dir, "")? {
        for event in read_event_file(&model_dir, &file)? {
            for v in event.summary.map(|s| s.value).unwrap_or_default() {
                if let Some(h) = v.histo {
                    histograms.push((v.tag, event.step, h.num));
                }
            }
        }
    }
    let w: Vec<_> = histograms.iter().filter(|h| h.0 == "linear/w").collect();
    ensure!(w.iter().map(|h| h.1).collect::<Vec<_>>() == [0, 4, 8] && w.iter().all(|h| h.2 == 2.0), "{histograms:?}");
    Ok(())
}

/// `loss = log(w)`, `w` starting at 1, SGD at 0.6: `w` goes 1, 0.4, -1.1, so the loss of
/// step 2 is the log of a negative number.
fn diverging_model(
    _: &Features,
    _: Option<Outlet>,
    mode: Mode,
    _: &Params,
    b: &mut GraphBuilder<'_>,
) -> engine_estimator::Result<EstimatorSpec> {
    let w = b.variable("w", &[], Initializer::Ones, true)?;
    let mut spec = EstimatorSpec::new(mode);
    spec.loss = Some(b.log(w)?);
    spec.predictions.insert("w".into(), w);
    spec.train_op = Some(TrainOp::Minimize(sgd(0.6)));
    Ok(spec)
}

#[test]
fn nan_tensor_hook_fails_naming_the_step() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = Estimator::new(diverging_model, config(&dir_string(&dir), 100))?;
    let err = estimator
        .train(&train_input, Vec::new(), StepLimit::Steps(10), Vec::new())
        .err()
        .context("trained through a NaN")?;
    ensure!(matches!(err, EstimatorError::NanLoss { step: 2 }), "{err:?}");
    ensure!(err.to_string() == "NaN loss during training at step 2", "{err}");
    // No checkpoint records the diverged state.
    ensure!(estimator.latest_checkpoint()?.as_deref() == Some("model.ckpt-0"));
    Ok(())
}

#[test]
fn profiler_hook_writes_a_chrome_trace_of_the_steps_asked_for() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.1)?;
    estimator.train(&train_input, vec![Box::new(ProfilerHook::steps(2, 3))], StepLimit::Steps(6), Vec::new())?;
    let text = std::fs::read_to_string(dir.path().join("timeline-3.json")).context("no trace written")?;
    let trace: serde_json::Value = serde_json::from_str(&text)?;
    let events = trace["traceEvents"].as_array().context("no traceEvents")?;
    ensure!(!events.is_empty());
    let mut steps = std::collections::BTreeSet::new();
    for e in events {
        ensure!(e["ph"] == "X" && e["name"].is_string() && e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}");
        ensure!(e["ts"].as_f64().is_some_and(|t| t >= 0.0), "{e}");
        steps.insert(e["args"]["step"].as_u64().context("step")?);
    }
    ensure!(steps.into_iter().collect::<Vec<_>>() == [2, 3], "only steps 2 and 3 are profiled");
    ensure!(events.iter().any(|e| e["name"] == "MatMul"), "the model's matmul is timed");
    Ok(())
}

#[test]
fn early_stopping_stops_training_on_eval_results_from_train_and_evaluate() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Learning rate 0: the eval loss never decreases. Evaluations run every 5 steps, in the
    // saver's listener (after the other hooks of that step), so at step s the hook sees
    // evaluations up to s - 5: at 25 the best loss (step 5) is 15 > 10 steps old.
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.0)?;
    let hook =
        EarlyStoppingHook::new("loss", StopCondition::NoDecrease { max_steps_without_decrease: 10 }, "eval", 0, 5);
    let train_spec = TrainSpec::new(train_input, Some(1000)).with_hooks(vec![Box::new(hook)]);
    let eval_spec = EvalSpec { every_n_steps: Some(5), ..EvalSpec::new(eval_input) };
    let result = train_and_evaluate(&estimator, train_spec, eval_spec)?;
    ensure!(result["global_step"] == 25.0, "{result:?}");
    ensure!(estimator.latest_checkpoint()?.as_deref() == Some("model.ckpt-25"));
    let evals = scalars(&dir, "eval")?;
    ensure!(steps_of(&evals, "loss") == [5, 10, 15, 20, 25], "{evals:?}");
    let _: BTreeMap<String, f64> = result;
    Ok(())
}

/// The linear model trained at 0.3 for ten steps (its evaluation loss falls), then at 1.5,
/// past SGD's stability limit for this data (it rises every step after).
fn improves_then_diverges(
    features: &Features,
    labels: Option<Outlet>,
    mode: Mode,
    params: &Params,
    b: &mut GraphBuilder<'_>,
) -> engine_estimator::Result<EstimatorSpec> {
    let mut spec = estimator_common::linear_model(features, labels, mode, params, b)?;
    if mode == Mode::Train {
        let mut optimizer = sgd(0.3);
        optimizer.learning_rate = LearningRate::PiecewiseConstant { boundaries: vec![10], values: vec![0.3, 1.5] };
        spec.train_op = Some(TrainOp::Minimize(optimizer));
    }
    Ok(spec)
}

#[test]
fn early_stopping_restores_the_best_weights_into_the_final_checkpoint() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Two checkpoints kept: without its lease the best one (10) would be deleted at 20.
    let config = RunConfig { keep_checkpoint_max: 2, ..config(&dir_string(&dir), 5) };
    let estimator = Estimator::new(improves_then_diverges, config)?;
    let hook =
        EarlyStoppingHook::new("loss", StopCondition::NoDecrease { max_steps_without_decrease: 10 }, "eval", 0, 5)
            .restore_best_weights();
    let train_spec = TrainSpec::new(train_input, Some(1000)).with_hooks(vec![Box::new(hook)]);
    let eval_spec = EvalSpec { every_n_steps: Some(5), ..EvalSpec::new(eval_input) };
    let result = train_and_evaluate(&estimator, train_spec, eval_spec)?;
    // At 30 the hook sees evaluations up to 25; the best, 10, is 15 > 10 steps old.
    ensure!(result["global_step"] == 30.0, "{result:?}");
    let losses: Vec<(u64, f64)> =
        scalars(&dir, "eval")?.into_iter().filter(|p| p.0 == "loss").map(|p| (p.1, p.2)).collect();
    let steps: Vec<u64> = losses.iter().map(|p| p.0).collect();
    ensure!(steps == [5, 10, 15, 20, 25, 30], "one evaluation per checkpoint, the restored one once: {losses:?}");
    let best = losses[1].1;
    ensure!(losses[0].1 > best && losses[2].1 > best && losses[3].1 > losses[2].1, "falls, then rises: {losses:?}");
    ensure!(losses[5].1 == best, "the final evaluation is the best one's: {losses:?}");
    let read = |step: u64| read_checkpoint(&format!("{}/model.ckpt-{step}", dir_string(&dir)), None);
    let (best_ckpt, last) = (read(10)?, read(30)?);
    for name in ["linear/w", "linear/b"] {
        ensure!(last.tensors[name] == best_ckpt.tensors[name], "{name} of model.ckpt-30 is model.ckpt-10's");
    }
    ensure!(last.tensors["global_step"].scalar_value() == Some(30.0));
    ensure!(read(15).is_err() && read(20).is_err(), "the other old checkpoints were collected");
    let leases = std::fs::read_dir(dir.path().join("leases")).map(|d| d.count()).unwrap_or(0);
    ensure!(leases == 0, "the lease ends with the run");
    Ok(())
}

/// The linear model at 0.1 times `learning_rate_scale`, never below 0.03.
fn reducible_rate(
    features: &Features,
    labels: Option<Outlet>,
    mode: Mode,
    params: &Params,
    b: &mut GraphBuilder<'_>,
) -> engine_estimator::Result<EstimatorSpec> {
    let mut spec = estimator_common::linear_model(features, labels, mode, params, b)?;
    if mode == Mode::Train {
        let mut optimizer = sgd(0.1);
        optimizer.learning_rate =
            LearningRate::ReducedOnPlateau { then: Box::new(LearningRate::Constant(0.1)), min_lr: 0.03 };
        spec.train_op = Some(TrainOp::Minimize(optimizer));
    }
    Ok(spec)
}

#[test]
fn reduce_lr_on_plateau_halves_the_rate_after_patience_evaluations_without_improvement() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = RunConfig { save_summary_steps: 5, keep_checkpoint_max: 0, ..config(&dir_string(&dir), 5) };
    let estimator = Estimator::new(reducible_rate, config)?;
    // min_delta 10: no evaluation after the first improves on it. At step s the hook sees
    // evaluations up to s - 5, so with patience 2 it reduces at 20, 30 and 40.
    let hook = ReduceLrOnPlateauHook::new("loss", 0.5, 2).min_delta(10.0).run_every_steps(5);
    let train_spec = TrainSpec::new(train_input, Some(40)).with_hooks(vec![Box::new(hook)]);
    let eval_spec = EvalSpec { every_n_steps: Some(5), ..EvalSpec::new(eval_input) };
    train_and_evaluate(&estimator, train_spec, eval_spec)?;
    let scale = |step: u64| -> Result<f64> {
        let c = read_checkpoint(&format!("{}/model.ckpt-{step}", dir_string(&dir)), None)?;
        c.tensors.get("learning_rate_scale").and_then(|t| t.scalar_value()).context("no learning_rate_scale")
    };
    // The saver runs after the hook, so the checkpoint of a reducing step holds the new scale.
    let scales = [scale(15)?, scale(20)?, scale(25)?, scale(30)?, scale(35)?, scale(40)?];
    ensure!(scales == [1.0, 0.5, 0.5, 0.25, 0.25, 0.125], "{scales:?}");
    // The rate the steps ran at: 0.1, then 0.05, then min_lr (0.1 / 4 is below it).
    let mut rates: Vec<f64> =
        scalars(&dir, "")?.into_iter().filter(|p| p.0 == "learning_rate").map(|p| (p.2 * 1e6).round() / 1e6).collect();
    rates.dedup();
    ensure!(rates == [0.1, 0.05, 0.03], "{rates:?}");
    Ok(())
}

#[test]
fn a_hook_assigning_a_variable_the_graph_lacks_is_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.1)?;
    let hook = ReduceLrOnPlateauHook::new("loss", 0.5, 2).run_every_steps(1);
    let err = estimator
        .train(&train_input, vec![Box::new(hook)], StepLimit::Steps(3), Vec::new())
        .err()
        .context("assigned a variable that does not exist")?;
    ensure!(
        err.to_string().contains("ReduceLROnPlateau") && err.to_string().contains("'learning_rate_scale'"),
        "{err}"
    );
    Ok(())
}

/// Records every callback of an evaluation, fetches feature `v`, and stops after
/// `stop_after` batch groups when set.
struct EvalRecorder {
    events: Arc<Mutex<Vec<String>>>,
    stop_after: Option<usize>,
    runs: usize,
}

impl EvalRecorder {
    fn push(&self, event: String) -> engine_estimator::Result<()> {
        self.events.lock().map_err(|_| EstimatorError::Other("poisoned".into()))?.push(event);
        Ok(())
    }
}

impl engine_estimator::hooks::SessionRunHook for EvalRecorder {
    fn name(&self) -> &str {
        "eval_recorder"
    }
    fn required_tensors(&self) -> Vec<String> {
        vec!["v".into()]
    }
    fn begin(&mut self, ctx: &HookContext<'_>) -> engine_estimator::Result<()> {
        self.push(format!("begin {}", ctx.global_step))
    }
    fn after_create_session(&mut self, ctx: &HookContext<'_>) -> engine_estimator::Result<()> {
        let vars = ctx.session.export_variables()?;
        self.push(format!("session {}", vars.contains_key("linear/w")))
    }
    fn before_run(&mut self, _: &HookContext<'_>) -> engine_estimator::Result<engine_estimator::hooks::RunArgs> {
        Ok(engine_estimator::hooks::RunArgs { fetches: vec!["v".into()], profile: false })
    }
    fn after_run(
        &mut self,
        ctx: &HookContext<'_>,
        values: &engine_estimator::hooks::RunValues,
    ) -> engine_estimator::Result<()> {
        self.runs += 1;
        let v = values.results.get("v").and_then(|t| t.as_f32()).map(|d| format!("{d:?}")).unwrap_or_default();
        let has_loss = values.results.contains_key("loss");
        self.push(format!("run {v} loss={has_loss}"))?;
        if self.stop_after == Some(self.runs) {
            ctx.request_stop();
        }
        Ok(())
    }
    fn end(&mut self, ctx: &HookContext<'_>) -> engine_estimator::Result<()> {
        self.push(format!("end {}", ctx.global_step))
    }
}

#[test]
fn evaluation_hooks_see_every_batch_fetch_tensors_and_can_stop_early() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.1)?;
    estimator.train(&train_input, Vec::new(), StepLimit::Steps(3), Vec::new())?;
    let events = Arc::new(Mutex::new(Vec::new()));
    let hook = EvalRecorder { events: events.clone(), stop_after: None, runs: 0 };
    let full = estimator.evaluate(&eval_input, None, vec![Box::new(hook)], None, None)?;
    let seen = events.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    ensure!(
        seen == [
            "begin 3",
            "session true",
            "run [0.0, 1.0, 2.0, 3.0] loss=true",
            "run [4.0, 5.0, 6.0, 7.0] loss=true",
            "run [8.0, 9.0] loss=true",
            "end 3"
        ],
        "{seen:#?}"
    );
    ensure!((full["mean_v"] - 4.5).abs() < 1e-6, "{full:?}");
    // A stop request ends the evaluation after that batch: the metrics cover it alone.
    let hook = EvalRecorder { events: Arc::new(Mutex::new(Vec::new())), stop_after: Some(1), runs: 0 };
    let first = estimator.evaluate(&eval_input, None, vec![Box::new(hook)], None, Some("stopped"))?;
    ensure!((first["mean_v"] - 1.5).abs() < 1e-6, "{first:?}");
    Ok(())
}
