//! `engine run`: the spec and its overrides are validated fully before anything runs.

mod common;

use anyhow::{Context, Result, ensure};
use common::{cnn_text, engine, spec_path, write_spec};

#[test]
fn run_trains_evaluates_checkpoints_and_resumes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let model_dir = dir.path().join("model");
    let model_dir = model_dir.to_str().unwrap_or_default();
    let spec = spec_path("fashion_mnist_cnn.ron");
    let args = |steps: &str| {
        vec![
            "run".to_string(),
            spec.clone(),
            "--max-steps".into(),
            steps.into(),
            "--model-dir".into(),
            model_dir.to_string(),
            "--set".into(),
            "run_config.save_checkpoints_steps=10".into(),
            "--set".into(),
            "eval_spec.steps=2".into(),
        ]
    };
    let run = |steps: &str| -> Result<common::Output> {
        let a = args(steps);
        engine(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = run("30")?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    ensure!(out.stdout.contains("'global_step': 30") && out.stdout.contains("'accuracy': "), "{}", out.stdout);
    ensure!(out.stderr.contains("Saving checkpoints for 0 into"), "{}", out.stderr);
    ensure!(out.stderr.contains("Saving dict for global step 30: accuracy = "), "{}", out.stderr);
    let state = std::fs::read_to_string(dir.path().join("model/checkpoint"))?;
    ensure!(state.starts_with("model_checkpoint_path: \"model.ckpt-30\""), "{state}");
    let files: Vec<String> = std::fs::read_dir(dir.path().join("model"))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    ensure!(files.iter().any(|f| f.starts_with("events.out.tfevents.")), "{files:?}");
    ensure!(files.iter().any(|f| f == "eval"), "{files:?}");

    // A second run continues from step 30.
    let out = run("40")?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    ensure!(out.stderr.contains("Restoring parameters from model.ckpt-30"), "{}", out.stderr);
    ensure!(out.stdout.contains("'global_step': 40"), "{}", out.stdout);
    // And one at its own max_steps does nothing but evaluate.
    let out = run("40")?;
    ensure!(
        out.code == Some(0) && out.stderr.contains("Skipping training since max_steps has already saved"),
        "{}",
        out.stderr
    );
    Ok(())
}

#[test]
fn flags_are_checked_like_the_spec() -> Result<()> {
    let spec = spec_path("fashion_mnist_cnn.ron");
    let out = engine(&["run", &spec, "--max-steps", "0"])?;
    ensure!(out.code == Some(1));
    ensure!(
        out.stderr.trim_end() == "error: `--max-steps 0` (column 1): train_spec.max_steps: must be positive",
        "{}",
        out.stderr
    );
    let out = engine(&[
        "run",
        &spec,
        "--set",
        "run_config.save_checkpoints_secs=60",
        "--set",
        "run_config.save_checkpoints_steps=10",
    ])?;
    ensure!(
        out.code == Some(1) && out.stderr.contains("run_config.save_checkpoints_secs: cannot be set together"),
        "{}",
        out.stderr
    );
    let out = engine(&["run", &spec, "--device", "tpu"])?;
    ensure!(out.code == Some(2) && out.stderr.contains("expected one of: cpu, wgpu[:N], cuda[:N]"), "{}", out.stderr);
    let out = engine(&["run", &spec, "--strategy", "horovod"])?;
    ensure!(out.code == Some(2) && out.stderr.contains("expected one of: default, one_device"), "{}", out.stderr);
    Ok(())
}

#[test]
fn a_bad_spec_fails_before_running() -> Result<()> {
    let text = cnn_text()?.replacen("loss: SparseCategoricalCrossentropy(from_logits: true)", "loss: Hinge", 1);
    let (_dir, path) = write_spec("hinge.ron", &text)?;
    let path = path.display().to_string();
    let out = engine(&["run", &path])?;
    ensure!(out.code == Some(1));
    let want = format!(
        "error: {path}:14:11: loss: unknown loss `Hinge`, expected one of: \
         SparseCategoricalCrossentropy, CategoricalCrossentropy, BinaryCrossentropy, MeanSquaredError"
    );
    ensure!(out.stderr.trim_end() == want, "expected `{want}`, got `{}`", out.stderr);
    Ok(())
}

/// `ENGINE_LOG_FORMAT=json`: every stderr line is one JSON object with a UTC time, a
/// level and the message, for log collectors; the human format stays the default.
#[test]
fn json_log_lines_for_machines() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let spec = spec_path("fashion_mnist_cnn.ron");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_engine"))
        .args(["run", &spec, "--max-steps", "3", "--model-dir", &model_dir, "--set", "eval_spec.steps=1"])
        .env("ENGINE_LOG_FORMAT", "json")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{stderr}");
    let mut messages = Vec::new();
    for line in stderr.lines() {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| anyhow::anyhow!("not JSON ({e}): {line}"))?;
        ensure!(v["level"] == "INFO" || v["level"] == "WARN", "{line}");
        let time = v["time"].as_str().unwrap_or_default();
        ensure!(time.len() == "2026-11-24T09:39:37.617Z".len() && time.ends_with('Z'), "{line}");
        messages.push(v["message"].as_str().unwrap_or_default().to_string());
    }
    ensure!(messages.iter().any(|m| m.starts_with("Saving dict for global step 3")), "{messages:?}");
    Ok(())
}

/// A model dir another model trained in: the error names the checkpoint and the two ways
/// out (a new `--model-dir`, or `warm_start_from`), not just two shapes.
#[test]
fn a_model_dir_of_another_model_names_the_checkpoint_and_the_fix() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let model_dir = dir.path().join("model").display().to_string();
    let spec = spec_path("fashion_mnist_cnn.ron");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", &spec, "--max-steps", "1", "--model-dir", &model_dir, "--set", "eval_spec.steps=1"];
        args.extend(extra);
        engine(&args)
    };
    let out = run(&[])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    let out = run(&["--set", "model.layers[0].filters=16"])?;
    ensure!(out.code == Some(1), "{}", out.stderr);
    for expected in [
        "model.ckpt-1 in ",
        "The model dir holds another model",
        "variable conv2d/",
        "--model-dir DIR",
        "warm_start_from",
    ] {
        ensure!(out.stderr.contains(expected), "missing `{expected}` in:\n{}", out.stderr);
    }
    Ok(())
}

/// Resuming with another optimizer says what changed (the new slots, by name), not two
/// fingerprints.
#[test]
fn a_changed_optimizer_is_named_by_its_new_variables() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let model_dir = dir.path().join("model").display().to_string();
    let spec = spec_path("fashion_mnist_cnn.ron");
    let run = |steps: &str, extra: &[&str]| {
        let mut args =
            vec!["run", &spec, "--max-steps", steps, "--model-dir", &model_dir, "--set", "eval_spec.steps=1"];
        args.extend(extra);
        engine(&args)
    };
    let out = run("1", &[])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    let out = run("2", &["--set", "optimizer=Adam(learning_rate: 0.001)"])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    for expected in ["was written by another graph", "new variable(s) start from their initializers", "/Adam"] {
        ensure!(out.stderr.contains(expected), "missing `{expected}` in:\n{}", out.stderr);
    }
    Ok(())
}

/// The README's transcript of `engine run` has the log format of a real run: each of its
/// lines, numbers and the model dir aside, is a line this build prints.
#[test]
fn the_readme_transcript_is_what_a_run_prints() -> Result<()> {
    const README: &str = include_str!("../../README.md");
    let start = README.find("$ engine run specs/fashion_mnist_cnn.ron\n").context("no transcript in README.md")?;
    let transcript = &README[start..];
    let transcript = &transcript[..transcript.find("```").context("the transcript does not end")?];
    let dir = tempfile::tempdir()?;
    let model_dir = dir.path().join("model").display().to_string();
    let spec = spec_path("fashion_mnist_cnn.ron");
    let out = engine(&["run", &spec, "--max-steps", "200", "--model-dir", &model_dir])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    // A line's shape: every run of digits one `#`, the model dir a placeholder.
    let shape = |line: &str, dir: &str| {
        let line = line.replace(dir, "<model_dir>");
        let mut shaped = String::new();
        for c in line.chars() {
            if c.is_ascii_digit() {
                if !shaped.ends_with('#') {
                    shaped.push('#');
                }
            } else {
                shaped.push(c);
            }
        }
        shaped
    };
    let printed: Vec<String> = out.stderr.lines().chain(out.stdout.lines()).map(|l| shape(l, &model_dir)).collect();
    for line in transcript.lines().skip(1).filter(|l| *l != "...") {
        let wanted = shape(line, "runs/fashion_mnist_cnn");
        ensure!(printed.contains(&wanted), "README.md shows `{line}`, which a run no longer prints:\n{}", out.stderr);
    }
    Ok(())
}

/// `ReduceLROnPlateau` in a spec: the job's rate becomes reducible, the hook lowers it after
/// evaluations without improvement (min_delta 100: none improves), and `engine plan` shows
/// the scale's variable.
#[test]
fn reduce_lr_on_plateau_from_a_spec() -> Result<()> {
    let text = std::fs::read_to_string(spec_path("fashion_mnist_mlp.ron"))?.replace(
        "train_spec: (max_steps: 1406)",
        "train_spec: (max_steps: 1406, hooks: [ReduceLROnPlateau(metric: \"loss\", factor: 0.5, patience: 1, \
         min_delta: 100.0, run_every_steps: 4)])",
    );
    ensure!(text.contains("ReduceLROnPlateau"), "the MLP spec's train_spec changed");
    let (dir, path) = write_spec("plateau.ron", &text)?;
    let model_dir = dir.path().join("model").display().to_string();
    let path = path.display().to_string();
    let mut args = vec!["run", &path, "--max-steps", "12", "--model-dir", &model_dir];
    args.extend(["--set", "run_config.save_checkpoints_steps=4", "--set", "eval_spec.steps=2"]);
    args.extend(["--set", "eval_spec.every_n_steps=4"]);
    let out = engine(&args)?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    // At step 12 the hook sees the evaluations of 4 (the best) and 8 (no better): it reduces.
    ensure!(out.stderr.contains("ReduceLROnPlateau at step 12"), "{}", out.stderr);
    let plan = engine(&["plan", &path])?;
    ensure!(plan.code == Some(0) && plan.stdout.contains("learning_rate_scale"), "{}", plan.stdout);
    Ok(())
}

/// `train_spec.epochs`: one pass over Fashion-MNIST's 60,000 training examples in batches of
/// 128 is 468 steps (the remainder dropped), before the spec's max_steps of 1406.
#[test]
fn epochs_end_training_after_passes_over_the_input() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let model_dir = dir.path().join("model").display().to_string();
    let spec = spec_path("fashion_mnist_mlp.ron");
    let out = engine(&[
        "run",
        &spec,
        "--model-dir",
        &model_dir,
        "--set",
        "train_spec.epochs=1",
        "--set",
        "eval_spec.steps=1",
    ])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    ensure!(out.stderr.contains("1 epoch(s) of 468 steps end at step 468"), "{}", out.stderr);
    ensure!(out.stdout.contains("'global_step': 468"), "{}", out.stdout);
    let out = engine(&["plan", &spec, "--set", "train_spec.epochs=0"])?;
    ensure!(out.code != Some(0) && out.stderr.contains("train_spec.epochs: must be at least 1"), "{}", out.stderr);
    Ok(())
}

/// With one-hot labels (`SoftmaxCrossEntropy`, Keras' categorical cross-entropy) the
/// classification metrics read each label's class, as Keras' categorical metrics do: the
/// same checkpoint evaluated through integer and one-hot labels gives the same figures.
/// (They failed with a shape error at the first evaluation: `[10N]` against `[N]`.)
#[test]
fn one_hot_labels_give_the_metrics_of_integer_labels() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let model_dir = dir.path().join("model").display().to_string();
    let metrics = "metrics=[Accuracy, Precision(class_id: 2), Recall(average: Macro), AUC(average: Micro), \
                   TopKAccuracy(k: 3)]";
    let sparse = spec_path("fashion_mnist_cnn.ron");
    let common = ["--model-dir", &model_dir, "--set", metrics, "--set", "eval_spec.steps=1"];
    let mut args = vec!["run", &sparse, "--max-steps", "5"];
    args.extend(common);
    let out = engine(&args)?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    let one_hot = cnn_text()?
        .replace(
            "loss: SparseCategoricalCrossentropy(from_logits: true)",
            "loss: CategoricalCrossentropy(from_logits: true)",
        )
        .replace("scale: 255.0,", "scale: 255.0, maps: [OneHot(feature: \"label\", depth: 10)],");
    let (_spec_dir, one_hot) = write_spec("one_hot.ron", &one_hot)?;
    let one_hot = one_hot.display().to_string();
    let eval = |spec: &str| -> Result<String> {
        let mut args = vec!["eval", spec];
        args.extend(common);
        let out = engine(&args)?;
        ensure!(out.code == Some(0), "{}", out.stderr);
        let line = out.stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_default();
        // The loss differs in form only; the metrics must be equal.
        Ok(line.split(", ").filter(|kv| !kv.contains("'loss'")).collect::<Vec<_>>().join(", "))
    };
    let (a, b) = (eval(&sparse)?, eval(&one_hot)?);
    ensure!(a.contains("'auc_micro'") && a.contains("'top_3_accuracy'"), "{a}");
    ensure!(a == b, "integer labels: {a}\none-hot labels: {b}");
    Ok(())
}
