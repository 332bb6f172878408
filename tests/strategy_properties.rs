//! Property: over random small models (dense stacks of random widths, optional ReLU and
//! bias, SGD with momentum or Adam) and random per-replica batch sizes, `mirrored` and
//! `central_storage` with 2 or 3 replicas end a few steps with the variables `one_device`
//! reaches on the same global batches. In f64, so rounding cannot hide a real difference.

use engine::estimator::strategy::StrategyOptions;
use engine::estimator::{
    Estimator, EstimatorSpec, Mode, RunConfig, StepLimit, TrainOp,
    input::{Dataset, InputContext, InputError},
};
use engine::graph::{
    HostTensor, Initializer,
    optimizer::{LearningRate, Optimizer, OptimizerConfig},
};
use engine::runtime::{DeviceName, Precision};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Clone)]
struct Case {
    inputs: usize,
    layers: Vec<(usize, bool, bool)>,
    classes: usize,
    per_replica: usize,
    replicas: usize,
    adam: bool,
    central: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1..6usize,
        proptest::collection::vec((1..8usize, any::<bool>(), any::<bool>()), 0..3),
        2..5usize,
        1..6usize,
        2..4usize,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(inputs, layers, classes, per_replica, replicas, adam, central)| Case {
            inputs,
            layers,
            classes,
            per_replica,
            replicas,
            adam,
            central,
        })
}

const EXAMPLES: usize = 90;
const STEPS: u64 = 4;

fn data(c: &Case) -> Result<(BTreeMap<String, HostTensor>, HostTensor), engine::graph::GraphError> {
    let x: Vec<f32> = (0..EXAMPLES * c.inputs).map(|i| ((i * 2654435761) % 1000) as f32 / 500.0 - 1.0).collect();
    let y: Vec<i64> = (0..EXAMPLES as i64).map(|i| (i * 7) % c.classes as i64).collect();
    Ok((
        BTreeMap::from([("x".to_string(), HostTensor::f32(vec![EXAMPLES, c.inputs], x)?)]),
        HostTensor::i64(vec![EXAMPLES], y)?,
    ))
}

static RUN: AtomicUsize = AtomicUsize::new(0);

fn train(c: &Case, strategy: &str) -> Result<BTreeMap<String, HostTensor>, String> {
    let (features, labels) = data(c).map_err(|e| e.to_string())?;
    let batch = if strategy == "one_device" { c.per_replica * c.replicas } else { c.per_replica };
    let input_fn = move |_: Mode, _: &InputContext| -> Result<Dataset, InputError> {
        Dataset::from_tensors(features.clone(), Some(labels.clone()))?.batch_for_training(batch).map(|d| d.repeat(None))
    };
    let model = c.clone();
    let model_fn = move |f: &engine::estimator::Features,
                         labels: Option<engine::graph::Outlet>,
                         mode: Mode,
                         _: &engine::estimator::Params,
                         b: &mut engine::graph::GraphBuilder<'_>| {
        let mut h = f["x"];
        let mut width = model.inputs;
        let mut layers = model.layers.clone();
        layers.push((model.classes, false, true));
        for (i, (units, relu, bias)) in layers.iter().enumerate() {
            let w = b.variable(&format!("dense_{i}/kernel"), &[width, *units], Initializer::GlorotUniform, true)?;
            h = b.matmul(h, w)?;
            if *bias {
                let v = b.variable(
                    &format!("dense_{i}/bias"),
                    &[*units],
                    Initializer::RandomNormal { mean: 0.0, stddev: 0.2 },
                    true,
                )?;
                h = b.add(h, v)?;
            }
            if *relu {
                h = b.relu(h)?;
            }
            width = *units;
        }
        let mut spec = EstimatorSpec::new(mode);
        spec.predictions.insert("logits".into(), h);
        if let Some(l) = labels {
            let per = b.sparse_softmax_cross_entropy(h, l)?;
            spec.loss = Some(b.reduce_mean(per, &[], false)?);
        }
        let optimizer = if model.adam {
            Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 }
        } else {
            Optimizer::Sgd { momentum: 0.9, nesterov: false }
        };
        spec.train_op = Some(TrainOp::Minimize(OptimizerConfig {
            optimizer,
            learning_rate: LearningRate::Constant(0.1),
            clip_global_norm: None,
        }));
        Ok(spec)
    };
    let config = RunConfig {
        model_dir: format!("memory://strategy-properties/{}", RUN.fetch_add(1, Ordering::Relaxed)),
        random_seed: Some(3),
        train_distribute: strategy.parse().map_err(|e: engine::estimator::strategy::UnknownStrategy| e.to_string())?,
        strategy: StrategyOptions {
            devices: Some((0..c.replicas).map(DeviceName::cpu).collect()),
            ..StrategyOptions::default()
        },
        save_summary_steps: 0,
        log_step_count_steps: 1000,
        precision: Precision::F64,
        ..RunConfig::default()
    };
    let estimator = Estimator::new(model_fn, config).map_err(|e| e.to_string())?;
    estimator.train(&input_fn, Vec::new(), StepLimit::MaxSteps(STEPS), Vec::new()).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for name in estimator.get_variable_names().map_err(|e| e.to_string())? {
        out.insert(name.clone(), estimator.get_variable_value(&name).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// Trains `c` with `one_device` and with its strategy; the variables must agree to 1e-9
/// relative (f64: only the order of float sums differs).
fn check(c: &Case) -> Result<(), String> {
    let strategy = if c.central { "central_storage" } else { "mirrored" };
    let reference = train(c, "one_device")?;
    let got = train(c, strategy)?;
    if reference.keys().ne(got.keys()) {
        return Err(format!("variables differ: {:?} vs {:?}", reference.keys(), got.keys()));
    }
    for (name, want) in &reference {
        let (a, b) = (got[name].to_f64_vec(), want.to_f64_vec());
        let scale = b.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
        let d = a.iter().zip(&b).fold(0.0f64, |m, (p, q)| m.max((p - q).abs())) / scale;
        if d > 1e-9 {
            return Err(format!("{strategy} {name} differs by {d:.2e}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn strategies_train_like_one_device(c in case()) {
        check(&c).map_err(TestCaseError::fail)?;
    }
}

/// Shrunk from a failure: with 3 replicas the loss scale was the f32 constant 1/3, so an
/// f64 run differed from one_device by f32's rounding (8e-8); the pass now divides by 3.
#[test]
fn three_replicas_scale_the_loss_exactly() -> Result<(), String> {
    check(&Case { inputs: 1, layers: vec![], classes: 2, per_replica: 1, replicas: 3, adam: false, central: false })
}
