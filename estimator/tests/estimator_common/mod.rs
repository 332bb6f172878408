//! A small model and in-memory data shared by the Estimator API tests, and a logger that
//! keeps log lines so tests can check what hooks logged.
//!
//! The model is linear regression on two features, `prediction = x @ w + b`, trained with
//! SGD at the learning rate in `params["learning_rate"]`. A learning rate of 0 keeps the
//! initial weights (`w = 0.25`, `b = 0`), so results have closed forms.
#![allow(clippy::expect_used, reason = "test helpers fail the test by panicking")]
#![allow(dead_code)]

use engine_estimator::{
    Estimator, EstimatorSpec, Features, Mode, Params, Result, RunConfig, TrainOp,
    input::{Dataset, InputContext, InputError},
    metrics::Metric,
};
use engine_graph::{
    GraphBuilder, HostTensor, Initializer, Outlet,
    optimizer::{LearningRate, Optimizer, OptimizerConfig},
};
use std::collections::BTreeMap;
use std::sync::{Mutex, Once};

/// Examples in the data set.
pub const EXAMPLES: usize = 10;

/// Feature `v` of example `i` is `i` (its mean over the data set is 4.5); `x` is
/// `[i / 10, 1 - i / 10]`; the label is `2 x0 - x1 + 0.5`.
pub fn columns() -> (BTreeMap<String, HostTensor>, HostTensor) {
    let v: Vec<f32> = (0..EXAMPLES).map(|i| i as f32).collect();
    let x: Vec<f32> = (0..EXAMPLES).flat_map(|i| [i as f32 / 10.0, 1.0 - i as f32 / 10.0]).collect();
    let y: Vec<f32> = (0..EXAMPLES).map(|i| 2.0 * (i as f32 / 10.0) - (1.0 - i as f32 / 10.0) + 0.5).collect();
    // Shapes and lengths are constants of this file.
    let tensor = |shape: Vec<usize>, data: Vec<f32>| HostTensor::f32(shape, data).expect("consistent test tensor");
    let features =
        BTreeMap::from([("v".to_string(), tensor(vec![EXAMPLES], v)), ("x".to_string(), tensor(vec![EXAMPLES, 2], x))]);
    (features, tensor(vec![EXAMPLES, 1], y))
}

pub fn dataset() -> std::result::Result<Dataset, InputError> {
    let (features, labels) = columns();
    Dataset::from_tensors(features, Some(labels))
}

/// Training input: batches of 4, repeated forever (steps are bounded by the test).
pub fn train_input(_: Mode, _: &InputContext) -> std::result::Result<Dataset, InputError> {
    Ok(dataset()?.batch_drop_remainder(4).repeat(None))
}

/// Evaluation and prediction input: one pass in batches of 4, so the last batch has 2.
pub fn eval_input(_: Mode, _: &InputContext) -> std::result::Result<Dataset, InputError> {
    Ok(dataset()?.batch(4))
}

/// The linear model: predictions `prediction` and `double` (twice it), loss the mean
/// squared error, metrics `mean_v` (the mean of feature `v`) and `mse`.
pub fn linear_model(
    features: &Features,
    labels: Option<Outlet>,
    mode: Mode,
    params: &Params,
    b: &mut GraphBuilder<'_>,
) -> Result<EstimatorSpec> {
    let learning_rate = params.get("learning_rate").and_then(|v| v.as_f64()).unwrap_or(0.1) as f32;
    let x = features["x"];
    let prediction = b.with_scope("linear", |b| {
        let w = b.variable("w", &[2, 1], Initializer::Constant(0.25), true)?;
        let bias = b.variable("b", &[1], Initializer::Zeros, true)?;
        let xw = b.matmul(x, w)?;
        b.add(xw, bias)
    })?;
    let mut spec = EstimatorSpec::new(mode);
    let two = b.scalar(2.0)?;
    spec.predictions.insert("prediction".into(), prediction);
    spec.predictions.insert("double".into(), b.mul(prediction, two)?);
    if let Some(labels) = labels {
        let per_example = b.mean_squared_error(prediction, labels)?;
        spec.loss = Some(b.reduce_mean(per_example, &[], false)?);
        spec.eval_metric_ops.insert("mean_v".into(), Metric::Mean { values: features["v"] });
        spec.eval_metric_ops.insert("mse".into(), Metric::MeanSquaredError { labels, predictions: prediction });
    }
    if mode == Mode::Train {
        spec.train_op = Some(TrainOp::Minimize(sgd(learning_rate)));
    }
    Ok(spec)
}

pub fn sgd(learning_rate: f32) -> OptimizerConfig {
    OptimizerConfig {
        optimizer: Optimizer::Sgd { momentum: 0.0, nesterov: false },
        learning_rate: LearningRate::Constant(learning_rate),
        clip_global_norm: None,
    }
}

/// A RunConfig for tests: fixed seed, checkpoints every `save_steps`, quiet logging.
pub fn config(model_dir: &str, save_steps: u64) -> RunConfig {
    RunConfig {
        random_seed: Some(7),
        save_checkpoints_steps: Some(save_steps),
        save_summary_steps: 1000,
        log_step_count_steps: 1000,
        ..RunConfig::new(model_dir)
    }
}

pub fn linear_estimator(model_dir: &str, save_steps: u64, learning_rate: f64) -> Result<Estimator> {
    Ok(Estimator::new(linear_model, config(model_dir, save_steps))?
        .with_params(serde_json::json!({ "learning_rate": learning_rate })))
}

pub fn dir_string(dir: &tempfile::TempDir) -> String {
    dir.path().to_string_lossy().into_owned()
}

/// Log lines kept for tests (every test of a binary shares the logger; filter by content).
pub struct Captured {
    lines: Mutex<Vec<String>>,
}

impl log::Log for Captured {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if let Ok(mut lines) = self.lines.lock() {
            lines.push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

static CAPTURED: Captured = Captured { lines: Mutex::new(Vec::new()) };
static INSTALL: Once = Once::new();

/// Installs the capturing logger (once per test binary) and returns every line so far.
pub fn log_lines() -> Vec<String> {
    INSTALL.call_once(|| {
        if log::set_logger(&CAPTURED).is_ok() {
            log::set_max_level(log::LevelFilter::Info);
        }
    });
    CAPTURED.lines.lock().map(|l| l.clone()).unwrap_or_default()
}
