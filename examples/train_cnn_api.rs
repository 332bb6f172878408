//! TensorFlow's Estimator CNN tutorial on Fashion-MNIST, through the Rust API and without a
//! job spec: a model function that wires the network with `GraphBuilder`, input functions
//! over the IDX files, and `train_and_evaluate`.
//!
//! ```text
//! cargo run --release --example train_cnn_api [-- --max-steps 2814 --model-dir runs/train_cnn_api]
//! ```
//!
//! 2814 steps of 64 examples are three epochs. Running again with the same model dir resumes
//! from its latest checkpoint (and only evaluates when it is already at `--max-steps`).
//! `FASHION_MNIST_DIR` overrides where the data is (`apt-get install dataset-fashion-mnist`).

use anyhow::{Context, Result, bail};
use engine::estimator::{
    Estimator, EstimatorSpec, EvalSpec, Features, Mode, Params, RunConfig, TrainOp, TrainSpec,
    input::{Dataset, InputContext, InputError, Map},
    metrics::Metric,
    train_and_evaluate,
};
use engine::graph::{
    GraphBuilder, Initializer, Outlet,
    ops::{Padding, Window},
    optimizer::{LearningRate, Optimizer, OptimizerConfig},
};
use std::path::PathBuf;
use std::sync::Arc;

/// `activation(x @ kernel + bias)` under `scope`, Keras' `Dense`.
fn dense(
    b: &mut GraphBuilder<'_>,
    scope: &str,
    x: Outlet,
    inputs: usize,
    units: usize,
    relu: bool,
) -> engine::graph::Result<Outlet> {
    b.with_scope(scope, |b| {
        let kernel = b.variable("kernel", &[inputs, units], Initializer::GlorotUniform, true)?;
        let bias = b.variable("bias", &[units], Initializer::Zeros, true)?;
        let xw = b.matmul(x, kernel)?;
        let y = b.add(xw, bias)?;
        if relu { b.relu(y) } else { Ok(y) }
    })
}

/// Conv(32, 3x3, relu) -> MaxPool(2x2) -> Flatten -> Dense(64, relu) -> Dense(10), softmax
/// cross-entropy, SGD at 0.05: the network of `specs/fashion_mnist_cnn.ron`.
fn cnn_model_fn(
    features: &Features,
    labels: Option<Outlet>,
    mode: Mode,
    _: &Params,
    b: &mut GraphBuilder<'_>,
) -> engine::estimator::Result<EstimatorSpec> {
    let images = features["x"]; // [N, 28, 28, 1], scaled to [0, 1]
    let conv = b.with_scope("conv2d", |b| {
        let kernel = b.variable("kernel", &[3, 3, 1, 32], Initializer::GlorotUniform, true)?;
        let bias = b.variable("bias", &[32], Initializer::Zeros, true)?;
        let y = b.conv2d(images, kernel, [1, 1], Padding::Valid)?; // [N, 26, 26, 32]
        let y = b.add(y, bias)?;
        b.relu(y)
    })?;
    let pooled = b.max_pool2d(conv, Window { kernel: [2, 2], strides: [2, 2], padding: Padding::Valid })?; // [N, 13, 13, 32]
    let flat = b.flatten(pooled)?; // [N, 5408]
    let hidden = dense(b, "dense", flat, 13 * 13 * 32, 64, true)?;
    let logits = dense(b, "dense_1", hidden, 64, 10, false)?;

    let mut spec = EstimatorSpec::new(mode);
    let classes = b.argmax(logits, -1)?;
    spec.predictions.insert("classes".into(), classes);
    spec.predictions.insert("probabilities".into(), b.softmax(logits, -1)?);
    if let Some(labels) = labels {
        let per_example = b.sparse_softmax_cross_entropy(logits, labels)?;
        spec.loss = Some(b.reduce_mean(per_example, &[], false)?);
        spec.eval_metric_ops.insert("accuracy".into(), Metric::Accuracy { labels, predictions: classes });
    }
    if mode == Mode::Train {
        spec.train_op = Some(TrainOp::Minimize(OptimizerConfig {
            optimizer: Optimizer::Sgd { momentum: 0.0, nesterov: false },
            learning_rate: LearningRate::Constant(0.05),
            clip_global_norm: None,
        }));
    }
    Ok(spec)
}

fn data_dir() -> PathBuf {
    PathBuf::from(std::env::var("FASHION_MNIST_DIR").unwrap_or_else(|_| "/usr/share/datasets/fashion-mnist".into()))
}

/// Shuffled batches of 64 from the 60 000 training images, forever (max_steps ends training).
fn train_input(_: Mode, _: &InputContext) -> Result<Dataset, InputError> {
    let dir = data_dir();
    Ok(Dataset::from_idx(dir.join("train-images-idx3-ubyte.gz"), dir.join("train-labels-idx1-ubyte.gz"))?
        .map(Map::Scale(255.0))
        .shuffle(10_000, 1)
        .batch_drop_remainder(64)
        .repeat(None)
        .prefetch(2))
}

/// The 10 000 test images once, in batches of 1000.
fn eval_input(_: Mode, _: &InputContext) -> Result<Dataset, InputError> {
    let dir = data_dir();
    Ok(Dataset::from_idx(dir.join("t10k-images-idx3-ubyte.gz"), dir.join("t10k-labels-idx1-ubyte.gz"))?
        .map(Map::Scale(255.0))
        .batch(1000)
        .prefetch(1))
}

struct Args {
    max_steps: u64,
    model_dir: String,
}

fn parse_args() -> Result<Args> {
    let mut args = Args { max_steps: 2814, model_dir: "runs/train_cnn_api".into() };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--max-steps" => args.max_steps = value.parse().with_context(|| format!("--max-steps {value}"))?,
            "--model-dir" => args.model_dir = value,
            other => bail!("unknown flag {other}; expected --max-steps N or --model-dir DIR"),
        }
    }
    Ok(args)
}

fn main() -> Result<()> {
    engine::cli::cli::logging::init();
    let args = parse_args()?;
    let config = RunConfig {
        random_seed: Some(42),
        save_checkpoints_steps: Some(500),
        ..RunConfig::new(args.model_dir.as_str())
    };
    let estimator = Estimator::new(cnn_model_fn, config)?;
    let train_spec = TrainSpec::new(Arc::new(train_input), Some(args.max_steps));
    // Evaluate every 1000 steps and at the end.
    let eval_spec = EvalSpec { every_n_steps: Some(1000), ..EvalSpec::new(Arc::new(eval_input)) };
    let started = std::time::Instant::now();
    let metrics = train_and_evaluate(&estimator, train_spec, eval_spec)?;
    println!("final metrics after {:.1} s (model dir {}):", started.elapsed().as_secs_f64(), args.model_dir);
    for (name, value) in &metrics {
        match name.as_str() {
            "global_step" => println!("  {name:<12} {}", *value as u64),
            _ => println!("  {name:<12} {value:.4}"),
        }
    }
    Ok(())
}
