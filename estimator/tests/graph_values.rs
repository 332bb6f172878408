//! Values computed through the graph and the runtime against their references: metrics
//! against what Keras 2.15 gives for the same labels and predictions (the script is in the
//! test's comment), an export's preprocessing against the input pipeline's maps.

use anyhow::Result;
use engine_estimator::metrics::{Metric, MetricState, Select};
use engine_graph::{Graph, GraphBuilder, HostTensor, Plan};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;

const LABELS: [i64; 12] = [0, 1, 2, 2, 1, 0, 1, 2, 0, 1, 2, 1];
#[rustfmt::skip]
const PROBABILITIES: [f32; 36] = [
    0.70, 0.20, 0.10, 0.20, 0.50, 0.30, 0.10, 0.30, 0.60, 0.30, 0.30, 0.40,
    0.40, 0.35, 0.25, 0.50, 0.10, 0.40, 0.15, 0.70, 0.15, 0.20, 0.45, 0.35,
    0.25, 0.50, 0.25, 0.60, 0.30, 0.10, 0.05, 0.15, 0.80, 0.33, 0.33, 0.34,
];

/// The metric's result over the twelve examples, fed in batches of `batch` (the states
/// add up across batches, as evaluation adds them).
fn multi_class_auc(select: Select, batch: usize) -> Result<f64> {
    let mut state = MetricState::default();
    let mut built = None;
    for start in (0..LABELS.len()).step_by(batch) {
        let end = (start + batch).min(LABELS.len());
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let labels = b.constant(HostTensor::i64(vec![end - start], LABELS[start..end].to_vec())?)?;
        let probabilities =
            b.constant(HostTensor::f32(vec![end - start, 3], PROBABILITIES[start * 3..end * 3].to_vec())?)?;
        let metric = Metric::MultiClassAuc { labels, probabilities, num_classes: 3, num_thresholds: 200, select };
        let outs = metric.build("auc", &mut b)?;
        let exec = Executor::new(Arc::new(Plan::new(g, vec![])?), Device::cpu(), Precision::F32)?;
        let run = exec.run(&mut VariableStore::new(), &BTreeMap::new(), &outs, RunOptions::default())?;
        let increments: Vec<HostTensor> = run.fetched.iter().map(|v| v.to_host()).collect::<Result<_, _>>()?;
        state.add(&increments);
        built = Some(metric);
    }
    built.map(|m| m.result(&state)).ok_or_else(|| anyhow::anyhow!("no batch"))
}

/// ```python
/// oh = tf.one_hot(labels, 3)
/// AUC(num_thresholds=200, multi_label=True, num_labels=3)(oh, probs)  # macro 0.851218044757843
/// AUC(num_thresholds=200)(oh, probs)                                  # micro 0.8437500596046448
/// AUC(num_thresholds=200)(oh[:, k], probs[:, k])  # 0.8148148059844971, 0.7857142686843872, 0.953125
/// ```
#[test]
fn multi_class_auc_agrees_with_keras() -> Result<()> {
    let expected = [
        (Select::Macro, 0.851218044757843),
        (Select::Micro, 0.8437500596046448),
        (Select::Class(0), 0.8148148059844971),
        (Select::Class(1), 0.7857142686843872),
        (Select::Class(2), 0.953125),
    ];
    for (select, keras) in expected {
        for batch in [12, 5] {
            let got = multi_class_auc(select, batch)?;
            anyhow::ensure!((got - keras).abs() < 1e-6, "{select:?} in batches of {batch}: {got}, Keras {keras}");
        }
    }
    Ok(())
}

/// An export's preprocessing computes what the input pipeline's maps compute: `Scale(255)`
/// then a per-channel `Normalize`, on raw pixels fed to the graph.
#[test]
fn export_preprocessing_is_the_pipelines_maps() -> Result<()> {
    use engine_estimator::input::{FeatureInfo, Map, Schema};
    let schema = Schema::new(vec![FeatureInfo::new("x", engine_graph::DType::F32, vec![2, 2])], None)?;
    let maps = [Map::Scale(255.0), Map::Normalize { feature: "x".into(), mean: vec![0.5, 0.25], std: vec![0.5, 0.25] }];
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", engine_graph::DType::F32, engine_graph::Shape::batched(&[2, 2]))?;
    let inputs = BTreeMap::from([("x".to_string(), x)]);
    let out = engine_estimator::export::preprocess(&mut b, &inputs, &schema, &maps)?["x"];
    let exec = Executor::new(Arc::new(Plan::new(g, vec![])?), Device::cpu(), Precision::F32)?;
    let raw = [0.0f32, 255.0, 51.0, 102.0];
    let feeds = BTreeMap::from([("x".to_string(), HostTensor::f32(vec![1, 2, 2], raw.to_vec())?)]);
    let run = exec.run(&mut VariableStore::new(), &feeds, &[out], RunOptions::default())?;
    let got = run.fetched[0].to_host()?.to_f64_vec();
    // Channel c of each pixel: (raw / 255 - mean[c]) / std[c].
    let want = [(0.0 - 0.5) / 0.5, (1.0 - 0.25) / 0.25, (0.2 - 0.5) / 0.5, (0.4 - 0.25) / 0.25];
    for (g, w) in got.iter().zip(want) {
        anyhow::ensure!((g - w).abs() < 1e-6, "{got:?} against {want:?}");
    }
    Ok(())
}
