//! The seed's "Custom training loop with Keras and MultiWorkerMirroredStrategy" in Rust: the
//! loop is ours, the strategy distributes the step. Its CNN on Fashion-MNIST, a loop of
//! epochs × steps that logs the loss reduced over every replica, checkpoints each epoch
//! (on the chief), and resumes from the latest checkpoint when started again.
//!
//! ```text
//! # one process (any strategy: default, one_device, mirrored, central_storage)
//! cargo run --release --example custom_loop_multi_worker -- --strategy mirrored
//! # two workers on this machine, as the seed's TF_CONFIG describes them
//! export TF_CONFIG_CLUSTER='"cluster": {"worker": ["127.0.0.1:12345", "127.0.0.1:23456"]}'
//! TF_CONFIG="{$TF_CONFIG_CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
//!   target/release/examples/custom_loop_multi_worker --checkpoint-dir /tmp/ckpt &
//! TF_CONFIG="{$TF_CONFIG_CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 1}}" \
//!   target/release/examples/custom_loop_multi_worker --checkpoint-dir /tmp/ckpt
//! ```
//!
//! `--devices cpu:0,cpu:1` picks the replicas of `mirrored` and `central_storage`
//! (one per core by default). The same loop runs under `parameter_server` (ps tasks serve the variables and the
//! workers step asynchronously). SIGTERM or SIGINT stop every task after the same step;
//! the chief checkpoints it with the input position, and a restart continues exactly there.
//! `FASHION_MNIST_DIR` overrides where the data is (`apt-get install dataset-fashion-mnist`).

use anyhow::{Context, Result, bail};
use engine::estimator::strategy::{StrategyKind, StrategyOptions};
use engine::estimator::{
    EstimatorSpec, Features, Mode, Params, RunConfig, TrainOp,
    distribute::{DistributionStrategy, LoopSummaries, ReduceOp, Step},
    input::{AutoShardPolicy, Dataset, InputContext, InputError, Map},
    metrics::Metric,
    preemption,
};
use engine::graph::{
    GraphBuilder, Initializer, Outlet,
    ops::Padding,
    optimizer::{LearningRate, Optimizer, OptimizerConfig},
};
use engine::runtime::{DeviceName, Precision};
use std::path::PathBuf;

/// Keras' `L2(1e-5)`: `1e-5 * sum(w²)`, which is `2e-5 * l2_loss(w)`.
const L2: f32 = 1e-5;

/// `activation(x @ kernel + bias)` under `scope`, Keras' `Dense`; returns the output and
/// the kernel (for its regularizer).
fn dense(
    b: &mut GraphBuilder<'_>,
    scope: &str,
    x: Outlet,
    inputs: usize,
    units: usize,
    relu: bool,
) -> engine::graph::Result<(Outlet, Outlet)> {
    b.with_scope(scope, |b| {
        let kernel = b.variable("kernel", &[inputs, units], Initializer::GlorotUniform, true)?;
        let bias = b.variable("bias", &[units], Initializer::Zeros, true)?;
        let xw = b.matmul(x, kernel)?;
        let y = b.add(xw, bias)?;
        Ok((if relu { b.relu(y)? } else { y }, kernel))
    })
}

/// The seed's `build_cnn_model`: Conv2D(32, 3, relu) -> Flatten -> Dense(128, relu) ->
/// Dense(10), every kernel L2(1e-5)-regularized; sparse softmax cross-entropy from logits,
/// Keras' RMSprop at 0.001 (`keras: true`; the engine's default is TensorFlow 1's, which
/// starts its mean square at one and learns the first epoch much slower), and the seed's
/// `train_accuracy`.
fn cnn_model_fn(
    features: &Features,
    labels: Option<Outlet>,
    mode: Mode,
    _: &Params,
    b: &mut GraphBuilder<'_>,
) -> engine::estimator::Result<EstimatorSpec> {
    let images = features["x"]; // [N, 28, 28, 1], scaled to [0, 1]
    let (conv, conv_kernel) = b.with_scope("conv2d", |b| {
        let kernel = b.variable("kernel", &[3, 3, 1, 32], Initializer::GlorotUniform, true)?;
        let bias = b.variable("bias", &[32], Initializer::Zeros, true)?;
        let y = b.conv2d(images, kernel, [1, 1], Padding::Valid)?; // [N, 26, 26, 32]
        let y = b.add(y, bias)?;
        Ok::<_, engine::graph::GraphError>((b.relu(y)?, kernel))
    })?;
    let flat = b.flatten(conv)?; // [N, 21632]
    let (hidden, hidden_kernel) = dense(b, "dense", flat, 26 * 26 * 32, 128, true)?;
    let (logits, logits_kernel) = dense(b, "dense_1", hidden, 128, 10, false)?;

    let mut spec = EstimatorSpec::new(mode);
    let classes = b.argmax(logits, -1)?;
    spec.predictions.insert("classes".into(), classes);
    if let Some(labels) = labels {
        let per_example = b.sparse_softmax_cross_entropy(logits, labels)?;
        let data_loss = b.reduce_mean(per_example, &[], false)?;
        let mut penalties = Vec::new();
        for kernel in [conv_kernel, hidden_kernel, logits_kernel] {
            penalties.push(b.l2_loss(kernel)?);
        }
        let penalty = b.add_n(&penalties)?;
        let scale = b.scalar(2.0 * L2)?;
        let penalty = b.mul(penalty, scale)?;
        spec.loss = Some(b.add(data_loss, penalty)?);
        spec.eval_metric_ops.insert("accuracy".into(), Metric::Accuracy { labels, predictions: classes });
    }
    if mode == Mode::Train {
        spec.train_op = Some(TrainOp::Minimize(OptimizerConfig {
            // Keras' RMSprop, as the seed uses (rho 0.9, epsilon 1e-7, mean square from zero).
            optimizer: Optimizer::RmsProp { decay: 0.9, momentum: 0.0, epsilon: 1e-7, centered: false, keras: true },
            learning_rate: LearningRate::Constant(0.001),
            clip_global_norm: None,
        }));
    }
    Ok(spec)
}

fn data_dir() -> PathBuf {
    PathBuf::from(std::env::var("FASHION_MNIST_DIR").unwrap_or_else(|_| "/usr/share/datasets/fashion-mnist".into()))
}

/// The seed's `dataset_fn`: this pipeline's shard of the training images, shuffled (the
/// same order on every task, so the shards partition each global batch), batched per
/// replica, repeated so that epochs continue through the data.
fn dataset_fn(global_batch_size: usize, args: &Args, ctx: &InputContext) -> Result<Dataset, InputError> {
    let dir = data_dir();
    let per_replica = ctx.per_replica_batch_size(global_batch_size)?;
    let mut dataset =
        Dataset::from_idx(dir.join("train-images-idx3-ubyte.gz"), dir.join("train-labels-idx1-ubyte.gz"))?
            .map(Map::Scale(255.0));
    if let Some(n) = args.take {
        dataset = dataset.take(n);
    }
    if args.shuffle > 0 {
        dataset = dataset.shuffle(args.shuffle, args.seed);
    }
    Ok(dataset.shard_by(ctx, AutoShardPolicy::Data)?.batch_drop_remainder(per_replica).repeat(None).prefetch(2))
}

struct Args {
    strategy: StrategyKind,
    checkpoint_dir: String,
    epochs: i64,
    steps_per_epoch: i64,
    batch_per_replica: usize,
    shuffle: usize,
    take: Option<u64>,
    seed: u64,
    precision: Precision,
    devices: Option<Vec<DeviceName>>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        strategy: StrategyKind::MultiWorker,
        checkpoint_dir: std::env::temp_dir().join("ckpt").to_string_lossy().into_owned(),
        epochs: 3,
        steps_per_epoch: 70,
        batch_per_replica: 64,
        shuffle: 60_000,
        take: None,
        seed: 1,
        precision: Precision::F32,
        devices: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().with_context(|| format!("{flag} {value}: not a count"));
        match flag.as_str() {
            "--strategy" => args.strategy = value.parse()?,
            "--checkpoint-dir" => args.checkpoint_dir = value,
            "--epochs" => args.epochs = number()?.min(1 << 40) as i64,
            "--steps-per-epoch" => args.steps_per_epoch = number()?.min(1 << 40) as i64,
            "--batch-per-replica" => args.batch_per_replica = number()?.clamp(1, 1 << 16) as usize,
            "--shuffle" => args.shuffle = number()?.min(1 << 24) as usize,
            "--take" => args.take = Some(number()?),
            "--seed" => args.seed = number()?,
            "--devices" => args.devices = Some(value.split(',').map(str::parse).collect::<Result<_, _>>()?),
            "--precision" => {
                args.precision = match value.as_str() {
                    "f32" => Precision::F32,
                    "f64" => Precision::F64,
                    other => bail!("--precision {other}: expected f32 or f64"),
                }
            }
            other => bail!(
                "unknown flag {other}; expected --strategy, --checkpoint-dir, --epochs, --steps-per-epoch, \
                 --batch-per-replica, --shuffle, --take, --seed, --precision or --devices"
            ),
        }
    }
    Ok(args)
}

fn main() {
    engine::cli::cli::logging::init();
    match train() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("error: {e:#}");
            let code = match e.downcast_ref::<engine::estimator::EstimatorError>() {
                // Another task's signal stops this one too: retryable, as the engine CLI does.
                Some(engine::estimator::EstimatorError::Preempted { signal, .. }) => {
                    signal.unwrap_or(preemption::Signal::TERM).exit_code()
                }
                _ => 1,
            };
            std::process::exit(code.into());
        }
    }
}

fn train() -> Result<()> {
    let args = parse_args()?;
    let config = RunConfig {
        random_seed: Some(args.seed),
        precision: args.precision,
        strategy: StrategyOptions { devices: args.devices.clone(), ..StrategyOptions::default() },
        ..RunConfig::new("")
    };
    let strategy = DistributionStrategy::with_config(args.strategy, &config)?;
    let global_batch_size = args.batch_per_replica * strategy.num_replicas_in_sync();
    let dataset = strategy.distribute_datasets_from_function(|ctx| dataset_fn(global_batch_size, &args, ctx))?;
    if strategy.is_parameter_server() {
        strategy.serve_parameters(&cnn_model_fn, &Params::Null, &dataset)?;
        return Ok(());
    }
    let mut step = strategy.compile_step(&cnn_model_fn, &Params::Null, &dataset)?;
    let checkpoints = strategy.checkpoint_manager(&args.checkpoint_dir, 1)?;
    let mut summaries = strategy.summary_writer(&args.checkpoint_dir)?;

    let (mut epoch, mut step_in_epoch, mut iterator) = match checkpoints.restore_or_initialize(&mut step)? {
        Some(state) => {
            eprintln!("Restored {} (global step {})", state.path, state.global_step);
            (
                state.counter("epoch").unwrap_or(0),
                state.counter("step_in_epoch").unwrap_or(0),
                dataset.iter_resumed(&state)?,
            )
        }
        None => (0, 0, dataset.iter()?),
    };
    while epoch < args.epochs {
        let (mut total_loss, mut num_batches) = (0.0, 0);
        while step_in_epoch < args.steps_per_epoch {
            let batch = iterator.expect_batch()?;
            let per_replica = strategy.run(&mut step, batch)?;
            let loss = strategy.reduce(ReduceOp::Sum, &per_replica.losses())?;
            total_loss += loss;
            num_batches += 1;
            step_in_epoch += 1;
            summaries.scalar("loss", step.global_step(), loss)?;
            // Every task sees the stop after the same step; mid-epoch, the chief saves the
            // position in the epoch and in the input (at an epoch's end, the epoch's save does).
            if step.stop_requested() && step_in_epoch < args.steps_per_epoch {
                let saved =
                    checkpoints.save(&step, &[("epoch", epoch), ("step_in_epoch", step_in_epoch)], Some(&iterator))?;
                if let Some(info) = saved {
                    eprintln!("Saved {} at epoch {epoch}, step {step_in_epoch} of it", info.url);
                }
                return stopped(&strategy, &step, &mut summaries);
            }
        }
        let metrics = strategy.metrics(&step)?;
        let accuracy = metrics.get("accuracy").copied().unwrap_or(f64::NAN);
        let train_loss = if num_batches > 0 { total_loss / num_batches as f64 } else { f64::NAN };
        eprintln!("Epoch: {epoch}, accuracy: {accuracy:.6}, train_loss: {train_loss:.6}.");
        summaries.scalar("accuracy", step.global_step(), accuracy)?;
        step.reset_metrics();
        epoch += 1;
        step_in_epoch = 0;
        checkpoints.save(&step, &[("epoch", epoch), ("step_in_epoch", 0)], Some(&iterator))?;
        summaries.flush()?;
        if step.stop_requested() {
            return stopped(&strategy, &step, &mut summaries);
        }
    }
    strategy.finish(&step)?;
    eprintln!("Finished at global step {}", step.global_step());
    Ok(())
}

/// Ends a loop stopped by a signal (to this task or another) once its step is saved.
fn stopped(strategy: &DistributionStrategy, step: &Step, summaries: &mut LoopSummaries) -> Result<()> {
    strategy.finish(step)?;
    summaries.flush()?;
    let signal = preemption::requested();
    Err(engine::estimator::EstimatorError::Preempted { signal, step: Some(step.global_step()) }.into())
}
