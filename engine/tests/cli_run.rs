//! `engine run`: the spec and its overrides are validated fully before anything runs.

mod common;

use anyhow::{Result, ensure};
use common::{cnn_text, engine, spec_path, write_spec};

#[test]
fn a_valid_spec_is_compiled_then_refused_until_training_is_wired() -> Result<()> {
    let out = engine(&["run", &spec_path("fashion_mnist_cnn.ron"), "--max-steps", "10", "--model-dir", "/tmp/x"])?;
    ensure!(out.code == Some(1), "{:?}", out.code);
    ensure!(out.stderr.contains("training is not wired yet"), "{}", out.stderr);
    ensure!(out.stderr.contains("fashion_mnist_cnn.ron` is valid and compiles"), "{}", out.stderr);
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
    let text = cnn_text()?.replacen("loss: SparseSoftmaxCrossEntropy", "loss: Hinge", 1);
    let (_dir, path) = write_spec("hinge.ron", &text)?;
    let path = path.display().to_string();
    let out = engine(&["run", &path])?;
    ensure!(out.code == Some(1));
    let want = format!(
        "error: {path}:14:11: loss: unknown loss `Hinge`, expected one of: SparseSoftmaxCrossEntropy, \
         SoftmaxCrossEntropy, SigmoidCrossEntropy, MeanSquaredError"
    );
    ensure!(out.stderr.trim_end() == want, "expected `{want}`, got `{}`", out.stderr);
    Ok(())
}
