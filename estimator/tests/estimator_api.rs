//! The Estimator API with TensorFlow's semantics: `train` with incremental `steps` and
//! absolute `max_steps`, `evaluate` over every example once (including a last partial
//! batch, TensorFlow #25284), `predict` per example with `predict_keys`, the variable
//! accessors, and warm start only into an empty model dir.

mod estimator_common;

use anyhow::{Context, Result, ensure};
use engine_estimator::{EstimatorError, StepLimit, WarmStartSettings};
use engine_graph::HostTensor;
use estimator_common::{EXAMPLES, columns, dir_string, eval_input, linear_estimator, train_input};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn steps_are_incremental_max_steps_absolute_and_training_at_max_steps_skips() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.1)?;
    ensure!(estimator.latest_checkpoint()?.is_none());

    let first = estimator.train(&train_input, Vec::new(), StepLimit::Steps(5), Vec::new())?;
    ensure!(first.global_step == 5 && first.loss.is_some(), "{first:?}");
    ensure!(estimator.latest_checkpoint()?.as_deref() == Some("model.ckpt-5"));
    // `steps` counts from the checkpoint: 5 more.
    let second = estimator.train(&train_input, Vec::new(), StepLimit::Steps(5), Vec::new())?;
    ensure!(second.global_step == 10, "{second:?}");
    // `max_steps` is absolute: already past 8, nothing runs.
    let skipped = estimator.train(&train_input, Vec::new(), StepLimit::MaxSteps(8), Vec::new())?;
    ensure!(skipped.global_step == 10 && skipped.loss.is_none(), "{skipped:?}");
    let skipped = estimator.train(&train_input, Vec::new(), StepLimit::MaxSteps(10), Vec::new())?;
    ensure!(skipped.global_step == 10 && skipped.loss.is_none(), "{skipped:?}");
    let third = estimator.train(&train_input, Vec::new(), StepLimit::MaxSteps(12), Vec::new())?;
    ensure!(third.global_step == 12, "{third:?}");
    ensure!(estimator.latest_checkpoint()?.as_deref() == Some("model.ckpt-12"));
    let step = estimator.get_variable_value("global_step")?;
    ensure!(step.scalar_value() == Some(12.0), "{step:?}");
    // Training moved the weights from their initial 0.25.
    let w = estimator.get_variable_value("linear/w")?;
    ensure!(w.shape == vec![2, 1] && w.to_f64_vec().iter().all(|&v| v != 0.25), "{w:?}");
    Ok(())
}

#[test]
fn evaluate_covers_every_example_once_including_the_last_partial_batch() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Learning rate 0: the checkpoint keeps w = 0.25, b = 0, so predictions are known.
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.0)?;
    estimator.train(&train_input, Vec::new(), StepLimit::Steps(1), Vec::new())?;

    let (features, labels) = columns();
    let x = features["x"].to_f64_vec();
    let y = labels.to_f64_vec();
    let squared: Vec<f64> = (0..EXAMPLES).map(|i| (0.25 * x[2 * i] + 0.25 * x[2 * i + 1] - y[i]).powi(2)).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;

    // 10 examples in batches of 4, 4 and 2.
    let result = estimator.evaluate(&eval_input, None, Vec::new(), None, None)?;
    let keys: Vec<&str> = result.keys().map(String::as_str).collect();
    ensure!(keys == ["global_step", "loss", "mean_v", "mse"], "{result:?}");
    ensure!(result["global_step"] == 1.0, "{result:?}");
    // Mean of v = 0..9 is 4.5 only if each example counts once: dropping the last batch
    // gives 3.5, padding it gives 3.75.
    ensure!(close(result["mean_v"], 4.5), "{result:?}");
    // The loss is weighted by examples, not a mean of batch means.
    ensure!(close(result["loss"], mean(&squared)), "loss {} vs {}", result["loss"], mean(&squared));
    ensure!(close(result["mse"], mean(&squared)), "{result:?}");
    let batch_means = (mean(&squared[0..4]) + mean(&squared[4..8]) + mean(&squared[8..10])) / 3.0;
    ensure!(!close(result["loss"], batch_means), "the test data must tell the two apart");

    // `steps` bounds the batches: two batches are examples 0..8.
    let two = estimator.evaluate(&eval_input, Some(2), Vec::new(), None, Some("two_batches"))?;
    ensure!(close(two["mean_v"], 3.5) && close(two["loss"], mean(&squared[0..8])), "{two:?}");
    // Named evaluations write to eval_<name>/.
    ensure!(dir.path().join("eval_two_batches").is_dir() && dir.path().join("eval").is_dir());
    Ok(())
}

#[test]
fn evaluate_reads_the_checkpoint_it_is_given() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 3, 0.5)?;
    estimator.train(&train_input, Vec::new(), StepLimit::MaxSteps(6), Vec::new())?;
    let at_3 =
        estimator.evaluate(&eval_input, None, Vec::new(), Some(&format!("{}/model.ckpt-3", dir_string(&dir))), None)?;
    let latest = estimator.evaluate(&eval_input, None, Vec::new(), None, None)?;
    ensure!(at_3["global_step"] == 3.0 && latest["global_step"] == 6.0, "{at_3:?} {latest:?}");
    ensure!(at_3["loss"] != latest["loss"], "different weights give different losses");
    Ok(())
}

#[test]
fn predict_yields_one_map_per_example_and_predict_keys_select() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.3)?;
    ensure!(matches!(estimator.predict(&eval_input, None, None), Err(EstimatorError::NoCheckpoint(_))));
    estimator.train(&train_input, Vec::new(), StepLimit::Steps(3), Vec::new())?;

    let w = estimator.get_variable_value("linear/w")?.to_f64_vec();
    let b = estimator.get_variable_value("linear/b")?.to_f64_vec();
    let x = columns().0["x"].to_f64_vec();
    let all: Vec<_> = estimator.predict(&eval_input, None, None)?.collect::<Result<_, _>>()?;
    ensure!(all.len() == EXAMPLES, "{} predictions", all.len());
    for (i, p) in all.iter().enumerate() {
        ensure!(p.keys().map(String::as_str).collect::<Vec<_>>() == ["double", "prediction"], "{p:?}");
        let want = x[2 * i] * w[0] + x[2 * i + 1] * w[1] + b[0];
        let got = &p["prediction"];
        ensure!(got.shape == vec![1] && close(got.to_f64_vec()[0], want), "example {i}: {got:?} vs {want}");
        ensure!(close(p["double"].to_f64_vec()[0], 2.0 * want));
    }
    let only: Vec<_> = estimator.predict(&eval_input, Some(vec!["double".into()]), None)?.collect::<Result<_, _>>()?;
    ensure!(only.len() == EXAMPLES && only.iter().all(|p| p.len() == 1 && p.contains_key("double")));
    let unknown = estimator.predict(&eval_input, Some(vec!["probabilities".into()]), None);
    ensure!(matches!(&unknown, Err(e) if e.to_string().contains("probabilities")), "{:?}", unknown.err());
    Ok(())
}

#[test]
fn variable_names_and_values_come_from_the_latest_checkpoint() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let estimator = linear_estimator(&dir_string(&dir), 100, 0.0)?;
    ensure!(matches!(estimator.get_variable_names(), Err(EstimatorError::NoCheckpoint(_))));
    estimator.train(&train_input, Vec::new(), StepLimit::Steps(2), Vec::new())?;
    let names = estimator.get_variable_names()?;
    ensure!(names == ["global_step", "linear/b", "linear/w"], "{names:?}");
    ensure!(estimator.get_variable_value("linear/w")? == HostTensor::f32(vec![2, 1], vec![0.25, 0.25])?);
    ensure!(estimator.get_variable_value("linear/b")? == HostTensor::f32(vec![1], vec![0.0])?);
    let missing = estimator.get_variable_value("dense/kernel");
    ensure!(matches!(&missing, Err(EstimatorError::UnknownVariable(n)) if n == "dense/kernel"), "{missing:?}");
    Ok(())
}

#[test]
fn warm_start_applies_only_when_the_model_dir_has_no_checkpoint() -> Result<()> {
    let source_dir = tempfile::tempdir()?;
    let source = linear_estimator(&dir_string(&source_dir), 100, 0.5)?;
    source.train(&train_input, Vec::new(), StepLimit::Steps(4), Vec::new())?;
    let trained_w = source.get_variable_value("linear/w")?;
    let trained_b = source.get_variable_value("linear/b")?;
    ensure!(trained_w.to_f64_vec() != [0.25, 0.25] && trained_b.to_f64_vec() != [0.0]);

    // A fresh model dir with learning rate 0: after one step the variables are what
    // initialization (or warm start) made them.
    let target_dir = tempfile::tempdir()?;
    let target = linear_estimator(&dir_string(&target_dir), 100, 0.0)?
        .with_warm_start(WarmStartSettings::new(&dir_string(&source_dir), "linear/w"));
    target.train(&train_input, Vec::new(), StepLimit::Steps(1), Vec::new())?;
    ensure!(target.get_variable_value("linear/w")? == trained_w, "w is warm-started");
    ensure!(target.get_variable_value("linear/b")?.to_f64_vec() == [0.0], "b does not match the regex");
    ensure!(target.get_variable_value("global_step")?.scalar_value() == Some(1.0), "the step starts fresh");

    // The source moves on; the target now has a checkpoint of its own and keeps it.
    source.train(&train_input, Vec::new(), StepLimit::Steps(4), Vec::new())?;
    let moved_w = source.get_variable_value("linear/w")?;
    ensure!(moved_w != trained_w);
    target.train(&train_input, Vec::new(), StepLimit::Steps(1), Vec::new())?;
    ensure!(target.get_variable_value("linear/w")? == trained_w, "no warm start over an existing checkpoint");
    ensure!(target.get_variable_value("global_step")?.scalar_value() == Some(2.0));
    Ok(())
}

#[test]
fn a_spec_that_tensorflow_refuses_is_refused() -> Result<()> {
    use engine_estimator::{Estimator, EstimatorSpec, Features, Mode, Params};
    use engine_graph::{GraphBuilder, Outlet};
    // Training without a train_op.
    fn no_train_op(
        f: &Features,
        _: Option<Outlet>,
        mode: Mode,
        _: &Params,
        b: &mut GraphBuilder<'_>,
    ) -> engine_estimator::Result<EstimatorSpec> {
        let mut spec = EstimatorSpec::new(mode);
        spec.loss = Some(b.reduce_mean(f["v"], &[], false)?);
        Ok(spec)
    }
    let dir = tempfile::tempdir()?;
    let estimator = Estimator::new(no_train_op, estimator_common::config(&dir_string(&dir), 10))?;
    let err = estimator.train(&train_input, Vec::new(), StepLimit::Steps(1), Vec::new()).err().context("trained")?;
    ensure!(err.to_string().contains("training needs both a loss and a train_op"), "{err}");
    Ok(())
}
