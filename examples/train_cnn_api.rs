//! TensorFlow's Estimator CNN tutorial on Fashion-MNIST from Rust, without a job spec: the
//! network of `specs/fashion_mnist_cnn.ron` in Keras-named layers, input functions over the
//! IDX files, and `train_and_evaluate`, with one `use`.
//!
//! ```text
//! cargo run --release --example train_cnn_api [-- MAX_STEPS [MODEL_DIR]]
//! ```
//!
//! 2814 steps of 64 (the default) are three epochs; evaluation runs every 1000 steps and at
//! the end. Running again with the same model dir resumes from its latest checkpoint.
//! `FASHION_MNIST_DIR` overrides where the data is (`apt-get install dataset-fashion-mnist`).

use engine::prelude::*;

/// Conv(32, 3x3, relu) -> MaxPool(2x2) -> Flatten -> Dense(64, relu) -> Dense(10), softmax
/// cross-entropy, SGD at 0.05.
fn cnn_model_fn(
    features: &Features,
    labels: Option<Outlet>,
    mode: Mode,
    _: &Params,
    b: &mut GraphBuilder<'_>,
) -> engine::estimator::Result<EstimatorSpec> {
    let x = Conv2D::new(32, 3).activation(Activation::Relu).apply(b, features["x"])?;
    let x = MaxPooling2D::new(2).apply(b, x)?;
    let x = Flatten.apply(b, x)?;
    let x = Dense::new(64).activation(Activation::Relu).apply(b, x)?;
    let logits = Dense::new(10).apply(b, x)?;

    let mut spec = EstimatorSpec::new(mode);
    let classes = b.argmax(logits, -1)?;
    spec.predictions.insert("classes".into(), classes);
    spec.predictions.insert("probabilities".into(), b.softmax(logits, -1)?);
    if let Some(labels) = labels {
        let per_example = b.sparse_softmax_cross_entropy(logits, labels)?;
        spec.loss = Some(b.reduce_mean(per_example, &[], false)?);
        spec.eval_metric_ops.insert("accuracy".into(), Metric::Accuracy { labels, predictions: classes });
        spec.train_op = Some(TrainOp::Minimize(OptimizerConfig::sgd(0.05)));
    }
    Ok(spec)
}

/// `split` is `train` or `t10k`: its images scaled to [0, 1], and labels.
fn fashion_mnist(split: &str) -> Result<Dataset, InputError> {
    let dir = std::env::var("FASHION_MNIST_DIR").unwrap_or_else(|_| "/usr/share/datasets/fashion-mnist".into());
    let file = |kind: &str| format!("{dir}/{split}-{kind}-idx{}-ubyte.gz", if kind == "images" { 3 } else { 1 });
    Ok(Dataset::from_idx(file("images"), file("labels"))?.map(Map::Scale(255.0)))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    init_logging();
    let mut args = std::env::args().skip(1);
    let max_steps: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2814);
    let model_dir = args.next().unwrap_or_else(|| "runs/train_cnn_api".into());
    let config = RunConfig { random_seed: Some(42), save_checkpoints_steps: Some(500), ..RunConfig::new(model_dir) };
    let estimator = Estimator::new(cnn_model_fn, config)?;
    let train = |_: Mode, _: &InputContext| {
        Ok(fashion_mnist("train")?.shuffle(10_000, 1).batch_drop_remainder(64).repeat(None))
    };
    let eval = |_: Mode, _: &InputContext| Ok(fashion_mnist("t10k")?.batch(1000));
    let eval_spec = EvalSpec { every_n_steps: Some(1000), ..EvalSpec::new(eval) };
    let metrics = train_and_evaluate(&estimator, TrainSpec::new(train, Some(max_steps)), eval_spec)?;
    println!("{metrics:?}");
    Ok(())
}
