//! Strategy equivalence: every in-process strategy with N = 1, 2, 4 replicas, trained for
//! 100 steps from the same seed, ends with the same variables as `one_device` trained on
//! the same global batches (per-replica batch times N), to 1e-5 relative, and reports the
//! same final loss: the global batch's, however many replicas computed it. The CNN spec
//! (SGD), the residual functional spec (Adam, a stateful optimizer) and a model with
//! synchronized batch normalization (statistics over the global batch) run, an embedding
//! trained with momentum (row-sparse gradients, gathered rather than reduced), and
//! self-attention with dropout on its weights (a fused op whose mask follows the global
//! batch).
//!
//! The runs compute in f64. In f32, splitting a batch's gradient sum over replicas rounds
//! differently, and 100 steps of training amplify that (Adam most of all, normalizing
//! near-zero bias gradients whose sign is rounding noise): the comparison would measure
//! chaos, not the strategy. In f64 the ordering effects stay near 1e-12, so a difference
//! above 1e-5 is a bug in the distribution, which is what this test is for.

use anyhow::{Result, anyhow};
use engine::cli::{
    job,
    spec::{Override, Spec},
};
use engine::estimator::{Estimator, RunConfig, StepLimit, strategy::StrategyOptions};
use engine::graph::HostTensor;
use engine::runtime::DeviceName;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

const STEPS: u64 = 100;
const PER_REPLICA: usize = 16;

fn spec(file: &str, batch: usize) -> Result<Arc<Spec>> {
    let path = format!("{}/specs/{file}", env!("CARGO_MANIFEST_DIR"));
    let overrides = [
        Override::parse(&format!("train_input.batch_size={batch}"))?,
        Override::parse("train_input.shuffle_buffer=1000")?,
    ];
    Ok(Arc::new(Spec::from_file(std::path::Path::new(&path), &overrides)?))
}

/// Trains `STEPS` steps and returns every variable and the last step's loss.
fn train(file: &str, strategy: &str, replicas: usize) -> Result<Trained> {
    let spec = spec(file, if strategy == "one_device" { PER_REPLICA * replicas } else { PER_REPLICA })?;
    let dir = format!("memory://equivalence-{}-{strategy}-{replicas}/model", file.replace('/', "_"));
    let devices = (strategy != "one_device").then(|| (0..replicas).map(DeviceName::cpu).collect());
    let config = RunConfig {
        model_dir: dir,
        random_seed: Some(7),
        train_distribute: strategy.parse()?,
        strategy: StrategyOptions { devices, ..StrategyOptions::default() },
        save_summary_steps: 0,
        log_step_count_steps: 1000,
        precision: engine::runtime::Precision::F64,
        ..RunConfig::default()
    };
    let estimator = Estimator::new(job::SpecModelFn::new(spec.clone(), 7), config)?;
    let input = job::train_input_fn(&spec)?;
    let outcome = estimator.train(input.as_ref(), Vec::new(), StepLimit::MaxSteps(STEPS), Vec::new())?;
    if outcome.global_step != STEPS {
        return Err(anyhow!("stopped at step {}", outcome.global_step));
    }
    let mut out = BTreeMap::new();
    for name in estimator.get_variable_names()? {
        out.insert(name.clone(), estimator.get_variable_value(&name)?);
    }
    Ok((out, outcome.loss.ok_or_else(|| anyhow!("no step ran"))?))
}

type Trained = (BTreeMap<String, HostTensor>, f64);

/// one_device's run for `(file, replicas)`, trained once per test process: the tests of
/// both strategies compare against it (a second run into its model directory would only
/// find the final checkpoint and skip training, with no loss to report).
fn reference(file: &str, replicas: usize) -> Result<Arc<Trained>> {
    type Cell = Arc<OnceLock<Result<Arc<Trained>, String>>>;
    static REFERENCES: Mutex<BTreeMap<(String, usize), Cell>> = Mutex::new(BTreeMap::new());
    let cell = REFERENCES
        .lock()
        .map_err(|_| anyhow!("references lock poisoned"))?
        .entry((file.to_string(), replicas))
        .or_default()
        .clone();
    let trained = cell.get_or_init(|| train(file, "one_device", replicas).map(Arc::new).map_err(|e| format!("{e:#}")));
    trained.clone().map_err(|e| anyhow!(e))
}

/// The largest difference relative to the reference tensor's largest magnitude, or to
/// 1e-9 when that is smaller: a variable whose gradient is zero in exact arithmetic
/// (attention's key bias, since the softmax ignores a shift shared by every key) holds only
/// rounding noise, about 1e-17 after 100 steps in f64, and the order in which the replicas'
/// sums are split changes that noise entirely. The floor keeps the comparison from measuring
/// it: below it, the absolute tolerance is 1e-14.
fn relative_difference(a: &HostTensor, b: &HostTensor) -> f64 {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-9);
    x.iter().zip(&y).fold(0.0f64, |m, (p, q)| m.max((p - q).abs())) / scale
}

fn check(file: &str, strategy: &str) -> Result<()> {
    for replicas in [1, 2, 4] {
        let trained = reference(file, replicas)?;
        let (reference, reference_loss) = (&trained.0, trained.1);
        let (got, loss) = train(file, strategy, replicas)?;
        let d = (loss - reference_loss).abs() / reference_loss.abs().max(1e-12);
        if d > 1e-6 {
            return Err(anyhow!(
                "{file} {strategy} x{replicas}: final loss {loss}, one_device {reference_loss} ({d:.2e} relative)"
            ));
        }
        if reference.keys().ne(got.keys()) {
            return Err(anyhow!("variables differ: {:?} vs {:?}", reference.keys(), got.keys()));
        }
        for (name, want) in reference {
            let d = relative_difference(&got[name], want);
            if d > 1e-5 {
                return Err(anyhow!("{file} {strategy} x{replicas}: {name} differs by {d:.2e} (relative)"));
            }
        }
    }
    Ok(())
}

#[test]
fn mirrored_equals_one_device_on_the_cnn() -> Result<()> {
    check("fashion_mnist_cnn.ron", "mirrored")
}

#[test]
fn central_storage_equals_one_device_on_the_cnn() -> Result<()> {
    check("fashion_mnist_cnn.ron", "central_storage")
}

#[test]
fn mirrored_equals_one_device_on_the_residual_functional_model() -> Result<()> {
    check("fashion_mnist_residual.ron", "mirrored")
}

#[test]
fn central_storage_equals_one_device_on_the_residual_functional_model() -> Result<()> {
    check("fashion_mnist_residual.ron", "central_storage")
}

/// Synchronized batch normalization: statistics over the global batch (one immediate
/// all-reduce of the mean and mean square per layer, differentiated in the backward
/// pass), so mirrored training equals one_device on that batch, moving statistics too.
#[test]
fn mirrored_with_synchronized_batch_norm_equals_one_device() -> Result<()> {
    check("../tests/specs/sync_batch_norm.ron", "mirrored")
}

#[test]
fn central_storage_with_synchronized_batch_norm_equals_one_device() -> Result<()> {
    check("../tests/specs/sync_batch_norm.ron", "central_storage")
}

/// An embedding trained with momentum: the replicas exchange only the rows they looked up
/// (`AllGatherRows`), and the update touches only the rows some replica looked up, as
/// one_device's does for the rows its global batch looked up.
#[test]
fn mirrored_equals_one_device_with_row_sparse_embedding_gradients() -> Result<()> {
    check("../tests/specs/embedding.ron", "mirrored")
}

#[test]
fn central_storage_equals_one_device_with_row_sparse_embedding_gradients() -> Result<()> {
    check("../tests/specs/embedding.ron", "central_storage")
}

/// Sanity: the comparison sees a difference when there is one (another seed's batches).
/// The fused attention with dropout on its weights: each replica draws its share of the
/// global batch's mask.
#[test]
fn mirrored_equals_one_device_with_attention_dropout() -> Result<()> {
    check("../tests/specs/attention.ron", "mirrored")
}

#[test]
fn central_storage_equals_one_device_with_attention_dropout() -> Result<()> {
    check("../tests/specs/attention.ron", "central_storage")
}

#[test]
fn the_comparison_can_fail() -> Result<()> {
    let a = reference("fashion_mnist_cnn.ron", 2)?;
    let spec2 = spec("fashion_mnist_cnn.ron", PER_REPLICA)?;
    let _ = spec2;
    let b = reference("fashion_mnist_cnn.ron", 1)?;
    let d = relative_difference(&a.0["dense/kernel"], &b.0["dense/kernel"]);
    if d <= 1e-5 {
        return Err(anyhow!("different global batches gave the same weights ({d:.2e})"));
    }
    Ok(())
}
