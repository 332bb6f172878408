//! TensorBoard reads our event files: its `EventAccumulator` sees our tags, steps, scalar values and
//! histograms, for training summaries in the model dir and evaluation summaries in `eval/`.

use anyhow::{Context, Result, bail, ensure};
use engine_estimator::model_dir::ModelDir;
use engine_estimator::summary::{SummaryWriter, histogram_of};
use engine_graph::HostTensor;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `$ENGINE_TEST_PYTHON`, else the repository's `.venv`; missing is a failure, never a skip.
fn python() -> Result<PathBuf> {
    let python = match std::env::var_os("ENGINE_TEST_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => repo_root().join(".venv/bin/python"),
    };
    ensure!(
        python.exists(),
        "Python for tests not found at {}: run scripts/setup-test-env.sh (or set ENGINE_TEST_PYTHON)",
        python.display()
    );
    Ok(python)
}

fn tensorboard_view(dir: &Path) -> Result<Value> {
    let output = Command::new(python()?).arg(repo_root().join("scripts/read_events.py")).arg(dir).output()?;
    if !output.status.success() {
        bail!("read_events.py failed on {}: {}", dir.display(), String::from_utf8_lossy(&output.stderr));
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn scalar_series(view: &Value, tag: &str) -> Result<Vec<(u64, f64)>> {
    let series = view["scalars"][tag].as_array().with_context(|| format!("no scalar `{tag}` in {view}"))?;
    series.iter().map(|point| Ok((point[0].as_u64().context("step")?, point[1].as_f64().context("value")?))).collect()
}

#[test]
fn tensorboard_reads_our_scalars_and_histograms() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = ModelDir::open(&tmp.path().to_string_lossy())?;

    let mut train = SummaryWriter::new(&dir, "")?;
    let losses = [(100u64, 2.5f64), (200, 1.25), (300, 0.625)];
    for (step, loss) in losses {
        train.scalars(step, &[("loss", loss), ("learning_rate", 0.01)])?;
    }
    train.scalar("global_step/sec", 300, 42.0)?;
    let kernel = HostTensor::f32(vec![2, 3], vec![-1.5, -0.25, 0.0, 0.5, 0.5, 3.0])?;
    train.histogram_of_tensor("dense/kernel", 300, &kernel)?;
    train.flush()?;

    let mut eval = SummaryWriter::new(&dir, "eval")?;
    eval.scalars(300, &[("accuracy", 0.875), ("loss", 0.7)])?;
    eval.flush()?;
    let mut named_eval = SummaryWriter::new(&dir, "eval_holdout")?;
    named_eval.scalar("accuracy", 300, 0.5)?;
    named_eval.flush()?;

    let view = tensorboard_view(tmp.path())?;
    assert_eq!(view["file_version"], 2.0, "{view}");
    assert_eq!(scalar_series(&view, "loss")?, losses.to_vec());
    assert_eq!(scalar_series(&view, "learning_rate")?.len(), 3);
    // simple_value is a float32: compare at that precision.
    assert!((scalar_series(&view, "learning_rate")?[0].1 - 0.01).abs() < 1e-8);
    assert_eq!(scalar_series(&view, "global_step/sec")?, vec![(300, 42.0)]);

    let histograms = view["histograms"]["dense/kernel"].as_array().context("no histogram")?;
    assert_eq!(histograms.len(), 1);
    let histogram = &histograms[0];
    let expected = histogram_of(&kernel.to_f64_vec());
    assert_eq!(histogram["step"], 300);
    assert_eq!(histogram["min"], -1.5);
    assert_eq!(histogram["max"], 3.0);
    assert_eq!(histogram["num"], 6.0);
    assert_eq!(histogram["sum"], 2.25);
    assert_eq!(histogram["sum_squares"], 2.25 + 0.0625 + 0.25 + 0.25 + 9.0);
    let buckets: Vec<f64> = serde_json::from_value(histogram["bucket"].clone())?;
    let limits: Vec<f64> = serde_json::from_value(histogram["bucket_limit"].clone())?;
    assert_eq!(buckets, expected.bucket);
    // serde_json parses floats within an ulp, not exactly: compare the limits relatively.
    assert_eq!(limits.len(), expected.bucket_limit.len());
    for (got, want) in limits.iter().zip(&expected.bucket_limit) {
        assert!(got == want || ((got - want) / want).abs() < 1e-15, "bucket limit {got} vs {want}");
    }
    assert_eq!(buckets.iter().sum::<f64>(), 6.0);

    let eval_view = tensorboard_view(&tmp.path().join("eval"))?;
    assert_eq!(scalar_series(&eval_view, "accuracy")?, vec![(300, 0.875)]);
    assert!((scalar_series(&eval_view, "loss")?[0].1 - 0.7).abs() < 1e-6);
    let holdout = tensorboard_view(&tmp.path().join("eval_holdout"))?;
    assert_eq!(scalar_series(&holdout, "accuracy")?, vec![(300, 0.5)]);
    Ok(())
}

#[test]
fn tensorboard_reads_event_files_uploaded_from_an_object_store() -> Result<()> {
    // Object-store writers upload the whole file on flush; what lands must be a valid event file.
    let dir = ModelDir::open("memory://summary-tb/run")?;
    let mut writer = SummaryWriter::new(&dir, "eval")?;
    writer.scalar("auc", 5, 0.75)?;
    writer.flush()?;
    writer.scalar("auc", 6, 0.8125)?;
    writer.flush()?;
    let tmp = tempfile::tempdir()?;
    dir.download_file(writer.name(), &tmp.path().join("events.out.tfevents.copy"))?;
    let view = tensorboard_view(tmp.path())?;
    assert_eq!(scalar_series(&view, "auc")?, vec![(5, 0.75), (6, 0.8125)]);
    Ok(())
}
