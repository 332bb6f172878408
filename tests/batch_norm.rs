//! Batch normalization end to end: moving statistics are non-trainable variables the
//! training step updates and checkpoints keep, prediction normalizes with them (so an
//! example's prediction does not depend on the batch it comes in), and a run resumed from
//! a checkpoint continues the statistics where an unbroken run has them.

use anyhow::{Result, anyhow, ensure};
use engine::cli::{
    job,
    spec::{Override, Spec},
};
use engine::estimator::{Estimator, RunConfig, StepLimit};
use engine::graph::HostTensor;
use std::sync::Arc;

const SPEC: &str = "tests/specs/sync_batch_norm.ron";

fn spec(overrides: &[&str]) -> Result<Arc<Spec>> {
    let path = format!("{}/{SPEC}", env!("CARGO_MANIFEST_DIR"));
    let overrides = overrides.iter().map(|o| Override::parse(o)).collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(Spec::from_file(std::path::Path::new(&path), &overrides)?))
}

fn estimator(spec: &Arc<Spec>, dir: &str) -> Result<Estimator> {
    let config = RunConfig {
        model_dir: dir.to_string(),
        random_seed: Some(7),
        save_summary_steps: 0,
        log_step_count_steps: 1000,
        precision: engine::runtime::Precision::F64,
        ..RunConfig::default()
    };
    Ok(Estimator::new(job::SpecModelFn::new(spec.clone(), 7), config)?)
}

fn train(dir: &str, to_step: u64) -> Result<Estimator> {
    let spec = spec(&["train_input.batch_size=32"])?;
    let estimator = estimator(&spec, dir)?;
    let input = job::train_input_fn(&spec)?;
    estimator.train(input.as_ref(), Vec::new(), StepLimit::MaxSteps(to_step), Vec::new())?;
    Ok(estimator)
}

fn max_abs_difference(a: &HostTensor, b: &HostTensor) -> f64 {
    a.to_f64_vec().iter().zip(b.to_f64_vec()).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
}

/// The logits of the first `n` test images, predicted in batches of `batch`.
fn logits(dir: &str, batch: usize, n: usize) -> Result<Vec<Vec<f64>>> {
    let spec = spec(&[&format!("eval_input.batch_size={batch}")])?;
    let estimator = estimator(&spec, dir)?;
    let input = job::eval_input_fn(&spec)?.ok_or_else(|| anyhow!("the spec has no eval input"))?;
    let mut out = Vec::new();
    for p in estimator.predict(input.as_ref(), Some(vec!["logits".into()]), None)?.take(n) {
        out.push(p?["logits"].to_f64_vec());
    }
    Ok(out)
}

#[test]
fn moving_statistics_are_trained_saved_and_used_for_prediction() -> Result<()> {
    let dir = "memory://batch-norm-predict/model";
    let estimator = train(dir, 30)?;
    let names = estimator.get_variable_names()?;
    for layer in ["batch_normalization", "batch_normalization_1"] {
        for v in ["gamma", "beta", "moving_mean", "moving_variance"] {
            let name = format!("{layer}/{v}");
            ensure!(names.contains(&name), "{name} is not among {names:?}");
        }
        // Started at 0 and 1; 30 updates with momentum 0.99 / 0.9 moved them.
        let mean = estimator.get_variable_value(&format!("{layer}/moving_mean"))?.to_f64_vec();
        let var = estimator.get_variable_value(&format!("{layer}/moving_variance"))?.to_f64_vec();
        ensure!(mean.iter().any(|m| m.abs() > 1e-4), "{layer}: moving mean never updated: {mean:?}");
        ensure!(var.iter().any(|v| (v - 1.0).abs() > 1e-4), "{layer}: moving variance never updated: {var:?}");
        ensure!(var.iter().all(|v| *v >= 0.0), "{layer}: negative moving variance: {var:?}");
    }
    // Inference mode: each example alone predicts what it predicts among 49 others. With
    // batch statistics a batch of one would normalize everything to beta.
    let alone = logits(dir, 1, 50)?;
    let together = logits(dir, 50, 50)?;
    ensure!(alone.len() == 50 && together.len() == 50);
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        let d = a.iter().zip(t).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
        ensure!(d < 1e-9, "example {i}: logits {a:?} alone, {t:?} in a batch");
    }
    let spread = alone.iter().map(|l| l[0]).fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    ensure!(spread.1 - spread.0 > 1e-3, "every example predicts the same logits: {spread:?}");
    Ok(())
}

#[test]
fn resuming_continues_the_moving_statistics() -> Result<()> {
    let unbroken = train("memory://batch-norm-unbroken/model", 24)?;
    let resumed_dir = "memory://batch-norm-resumed/model";
    train(resumed_dir, 12)?;
    let resumed = train(resumed_dir, 24)?;
    for name in unbroken.get_variable_names()? {
        let d = max_abs_difference(&unbroken.get_variable_value(&name)?, &resumed.get_variable_value(&name)?);
        // Checkpoints hold f32: the resumed half starts from values rounded to f32.
        ensure!(d < 1e-5, "{name} differs by {d:.2e} after a resume");
    }
    Ok(())
}
