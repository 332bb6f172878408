//! `train_and_evaluate`: when evaluations happen (an explicit step schedule, TensorFlow's
//! save-then-throttle rule, always the final step), and the model dir a run leaves.

mod estimator_common;

use anyhow::{Context, Result, ensure};
use engine_estimator::{
    EvalSpec, TrainSpec,
    checkpoint::CheckpointState,
    model_dir::ModelDir,
    summary::{event_files, read_event_file},
    train_and_evaluate,
};
use estimator_common::{config, dir_string, eval_input, linear_estimator, linear_model, train_input};

/// Steps at which `tag` was written in the event files of `subdir`.
fn scalar_steps(dir: &tempfile::TempDir, subdir: &str, tag: &str) -> Result<Vec<u64>> {
    let model_dir = ModelDir::open(&dir_string(dir))?;
    let mut steps = Vec::new();
    for file in event_files(&model_dir, subdir)? {
        for event in read_event_file(&model_dir, &file)? {
            if event.summary.is_some_and(|s| s.value.iter().any(|v| v.tag == tag)) {
                steps.push(event.step as u64);
            }
        }
    }
    Ok(steps)
}

fn specs(max_steps: u64, eval: impl FnOnce(EvalSpec) -> EvalSpec) -> (TrainSpec, EvalSpec) {
    let train = TrainSpec::new(train_input, Some(max_steps));
    (train, eval(EvalSpec::new(eval_input)))
}

#[test]
fn every_n_steps_evaluates_on_schedule_and_always_at_the_final_step() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Checkpoints every 3 steps would miss 5, 10, ...: the schedule brings its own saves.
    let estimator = linear_estimator(&dir_string(&dir), 3, 0.1)?;
    let (train, eval) = specs(23, |e| EvalSpec { every_n_steps: Some(5), ..e });
    let result = train_and_evaluate(&estimator, train, eval)?;
    ensure!(result["global_step"] == 23.0, "{result:?}");
    ensure!(scalar_steps(&dir, "eval", "loss")? == [5, 10, 15, 20, 23]);
    ensure!(scalar_steps(&dir, "eval", "mean_v")? == [5, 10, 15, 20, 23]);
    // The returned result is the final evaluation's.
    ensure!(["loss", "mean_v", "mse", "global_step"].iter().all(|k| result.contains_key(*k)), "{result:?}");

    // Run again to a later max_steps: it resumes, and the schedule stays on multiples of 5
    // (evaluation points must not depend on where a run was restarted).
    let (train, eval) = specs(31, |e| EvalSpec { every_n_steps: Some(5), ..e });
    let result = train_and_evaluate(&estimator, train, eval)?;
    ensure!(result["global_step"] == 31.0, "{result:?}");
    let steps = scalar_steps(&dir, "eval", "loss")?;
    ensure!(steps == [5, 10, 15, 20, 23, 25, 30, 31], "{steps:?}");
    Ok(())
}

#[test]
fn without_a_schedule_evaluation_follows_saves_within_the_throttle() -> Result<()> {
    // TensorFlow's local mode: evaluate after a save if `throttle_secs` have passed.
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 10, 0.1)?;
    let (train, eval) = specs(25, |e| EvalSpec { throttle_secs: 0, ..e });
    train_and_evaluate(&estimator, train, eval)?;
    ensure!(scalar_steps(&dir, "eval", "loss")? == [10, 20, 25]);

    // A long throttle: only the first save after step 0, and the final step.
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 10, 0.1)?;
    let (train, eval) = specs(25, |e| EvalSpec { throttle_secs: 3600, ..e });
    train_and_evaluate(&estimator, train, eval)?;
    ensure!(scalar_steps(&dir, "eval", "loss")? == [10, 25]);

    // Already at max_steps: no training, but the final step is still evaluated (once more).
    let (train, eval) = specs(25, |e| EvalSpec { throttle_secs: 3600, ..e });
    let result = train_and_evaluate(&estimator, train, eval)?;
    ensure!(result["global_step"] == 25.0);
    Ok(())
}

#[test]
fn a_run_leaves_the_model_dir_tensorflow_users_expect() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let run_config =
        engine_estimator::RunConfig { keep_checkpoint_max: 3, save_summary_steps: 10, ..config(&dir_string(&dir), 5) };
    let estimator = engine_estimator::Estimator::new(linear_model, run_config)?;
    let (train, eval) = specs(40, |e| EvalSpec { every_n_steps: Some(20), ..e });
    train_and_evaluate(&estimator, train, eval)?;

    // Every file, relative to the model dir.
    let mut files = Vec::new();
    let mut pending = vec![dir.path().to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path.strip_prefix(dir.path())?.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    let events: Vec<&String> = files.iter().filter(|f| f.starts_with("events.out.tfevents.")).collect();
    let eval_events: Vec<&String> = files.iter().filter(|f| f.starts_with("eval/events.out.tfevents.")).collect();
    // Training writes one file; the run's evaluations (20, 40) share one in eval/, so
    // TensorBoard sees one curve per run, not a file per point.
    ensure!(events.len() == 1 && eval_events.len() == 1, "{files:#?}");
    let model_dir = ModelDir::open(&dir_string(&dir))?;
    let evaluated: Vec<i64> = read_event_file(&model_dir, eval_events[0])?
        .into_iter()
        .filter(|e| e.summary.is_some())
        .map(|e| e.step)
        .collect();
    ensure!(evaluated == [20, 40], "{evaluated:?}");
    let rest: Vec<&String> = files.iter().filter(|f| !f.contains("events.out.tfevents.")).collect();
    // keep_checkpoint_max = 3 of the saves at 0, 5, ..., 40.
    ensure!(
        rest == ["checkpoint", "model.ckpt-30.safetensors", "model.ckpt-35.safetensors", "model.ckpt-40.safetensors"],
        "{files:#?}"
    );

    let text = std::fs::read_to_string(dir.path().join("checkpoint"))?;
    let state = CheckpointState::parse(&text, "checkpoint")?;
    ensure!(state.model_checkpoint_path == "model.ckpt-40", "{text}");
    ensure!(state.all_model_checkpoint_paths == ["model.ckpt-30", "model.ckpt-35", "model.ckpt-40"], "{text}");
    let times = &state.all_model_checkpoint_timestamps;
    ensure!(times.len() == 3 && times.windows(2).all(|w| w[0] <= w[1]), "{text}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
    ensure!(times.iter().all(|t| (now - t).abs() < 600.0), "timestamps are the save times: {text}");
    ensure!(text.lines().next() == Some("model_checkpoint_path: \"model.ckpt-40\""), "{text}");

    // Training summaries every 10 steps, evaluation summaries at the evaluated steps.
    ensure!(scalar_steps(&dir, "", "loss")? == [0, 10, 20, 30], "{:?}", scalar_steps(&dir, "", "loss"));
    ensure!(scalar_steps(&dir, "eval", "loss")? == [20, 40]);
    let checkpoints = estimator.checkpoints().list()?;
    ensure!(checkpoints.iter().map(|c| c.step).collect::<Vec<_>>() == [30, 35, 40]);
    ensure!(checkpoints.iter().all(|c| c.size_bytes > 0));
    let latest = estimator.latest_checkpoint()?.context("no latest")?;
    ensure!(latest == "model.ckpt-40");
    Ok(())
}
