//! Evaluation metrics as mergeable states.
//!
//! A metric is lowered to graph nodes that compute, for one batch, the *increments* of
//! its state (sums and counts, or confusion counts per threshold). The evaluation loop
//! adds increments on the host in f64, replicas and workers add their states together,
//! and only then is the result computed. Nothing is averaged twice, so a metric is exact
//! under any strategy and for any batch split, including a last partial batch.

mod accuracy;
mod auc;
mod confusion;
mod mean;
mod multi_auc;
mod per_class;
mod precision_recall;
mod squared_error;
mod top_k;

pub use confusion::markdown as confusion_markdown;
pub use per_class::Select;

use crate::{EstimatorError, Result};
use engine_graph::{DType, GraphBuilder, HostTensor, Outlet, Shape};

/// A metric over graph values; see each variant's file for its state and formula.
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    /// Fraction of predictions equal to labels.
    Accuracy {
        labels: Outlet,
        predictions: Outlet,
    },
    /// Mean of a value over all examples.
    Mean {
        values: Outlet,
    },
    /// TP / (TP + FP), labels and predictions read as booleans (predictions above `threshold`).
    Precision {
        labels: Outlet,
        predictions: Outlet,
        threshold: f32,
    },
    /// TP / (TP + FN).
    Recall {
        labels: Outlet,
        predictions: Outlet,
        threshold: f32,
    },
    /// Precision (or, with `recall`, recall) of a classifier over `num_classes` classes:
    /// one class against the rest, or averaged over classes (see [`Select`]).
    PerClass {
        labels: Outlet,
        classes: Outlet,
        num_classes: usize,
        select: Select,
        recall: bool,
    },
    /// Area under the ROC curve from confusion counts at `num_thresholds` thresholds.
    Auc {
        labels: Outlet,
        predictions: Outlet,
        num_thresholds: usize,
    },
    /// Area under the ROC curve of a classifier over `num_classes` classes, each against
    /// the rest: one class, or averaged over classes (see [`Select`]).
    MultiClassAuc {
        labels: Outlet,
        probabilities: Outlet,
        num_classes: usize,
        num_thresholds: usize,
        select: Select,
    },
    /// Counts of (label's class, predicted class) pairs; see [`Metric::matrix`].
    ConfusionMatrix {
        labels: Outlet,
        classes: Outlet,
        num_classes: usize,
    },
    MeanSquaredError {
        labels: Outlet,
        predictions: Outlet,
    },
    /// Fraction of examples whose label is among the `k` largest logits.
    TopKAccuracy {
        labels: Outlet,
        logits: Outlet,
        k: usize,
    },
}

impl Metric {
    /// Wires the per-batch state increments under `metrics/<name>` and returns the outlets
    /// to fetch, in state order.
    pub fn build(&self, name: &str, b: &mut GraphBuilder<'_>) -> Result<Vec<Outlet>> {
        let scope = format!("metrics/{name}");
        b.with_scope(&scope, |b| match self {
            Metric::Accuracy { labels, predictions } => accuracy::build(b, *labels, *predictions),
            Metric::Mean { values } => mean::build(b, *values),
            Metric::Precision { labels, predictions, threshold }
            | Metric::Recall { labels, predictions, threshold } => {
                precision_recall::build(b, *labels, *predictions, *threshold)
            }
            Metric::PerClass { labels, classes, num_classes, .. } => {
                per_class::build(b, *labels, *classes, *num_classes)
            }
            Metric::Auc { labels, predictions, num_thresholds } => {
                auc::build(b, *labels, *predictions, *num_thresholds)
            }
            Metric::MultiClassAuc { labels, probabilities, num_classes, num_thresholds, .. } => {
                multi_auc::build(b, *labels, *probabilities, *num_classes, *num_thresholds)
            }
            Metric::ConfusionMatrix { labels, classes, num_classes } => {
                confusion::build(b, *labels, *classes, *num_classes)
            }
            Metric::MeanSquaredError { labels, predictions } => squared_error::build(b, *labels, *predictions),
            Metric::TopKAccuracy { labels, logits, k } => top_k::build(b, *labels, *logits, *k),
        })
        .map_err(EstimatorError::from)
    }

    /// The metric's value from its accumulated state.
    pub fn result(&self, state: &MetricState) -> f64 {
        let s = &state.sums;
        match self {
            Metric::Accuracy { .. }
            | Metric::Mean { .. }
            | Metric::MeanSquaredError { .. }
            | Metric::TopKAccuracy { .. } => ratio(first(s, 0), first(s, 1)),
            Metric::Precision { .. } => precision_recall::precision(s),
            Metric::Recall { .. } => precision_recall::recall(s),
            Metric::PerClass { select, recall, .. } => per_class::result(s, *select, *recall),
            Metric::Auc { .. } => auc::result(s),
            Metric::MultiClassAuc { select, .. } => multi_auc::result(s, *select),
            // The fraction on the diagonal; evaluation reports the matrix instead.
            Metric::ConfusionMatrix { num_classes, .. } => {
                let m = confusion::matrix(s, *num_classes);
                let total: u64 = m.iter().flatten().sum();
                ratio((0..m.len()).map(|k| m[k][k]).sum::<u64>() as f64, total as f64)
            }
        }
    }

    /// The confusion matrix, row = label's class, column = predicted class, for a
    /// [`Metric::ConfusionMatrix`]; `None` for the scalar metrics.
    pub fn matrix(&self, state: &MetricState) -> Option<Vec<Vec<u64>>> {
        match self {
            Metric::ConfusionMatrix { num_classes, .. } => Some(confusion::matrix(&state.sums, *num_classes)),
            _ => None,
        }
    }
}

/// Accumulated sums, one vector per fetched increment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricState {
    pub sums: Vec<Vec<f64>>,
}

impl MetricState {
    /// Adds one batch's increments.
    pub fn add(&mut self, increments: &[HostTensor]) {
        if self.sums.is_empty() {
            self.sums = increments.iter().map(|t| vec![0.0; t.len()]).collect();
        }
        for (acc, inc) in self.sums.iter_mut().zip(increments) {
            for (a, v) in acc.iter_mut().zip(inc.to_f64_vec()) {
                *a += v;
            }
        }
    }

    /// Merges another replica's or worker's state.
    pub fn merge(&mut self, other: &MetricState) {
        if self.sums.is_empty() {
            self.sums = other.sums.clone();
            return;
        }
        for (a, b) in self.sums.iter_mut().zip(&other.sums) {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        }
    }

    /// Flattened, for sending through a collective.
    pub fn flatten(&self) -> Vec<f64> {
        self.sums.iter().flatten().copied().collect()
    }

    /// The inverse of `flatten`, given this state's layout.
    pub fn with_values(&self, flat: &[f64]) -> MetricState {
        let mut it = flat.iter().copied();
        MetricState { sums: self.sums.iter().map(|v| v.iter().map(|_| it.next().unwrap_or(0.0)).collect()).collect() }
    }
}

fn first(s: &[Vec<f64>], i: usize) -> f64 {
    s.get(i).and_then(|v| v.first()).copied().unwrap_or(0.0)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

/// `[sum(x), count(x)]` of a per-example float tensor.
pub(crate) fn sum_and_count(b: &mut GraphBuilder<'_>, x: Outlet) -> engine_graph::Result<Vec<Outlet>> {
    let total = b.reduce_sum(x, &[], false)?;
    let count = b.size(x, &[])?;
    Ok(vec![total, count])
}

/// Flattens a per-example value to a vector (`[N]`, `[N, 1]` and `[N, k]` all become 1-D).
pub(crate) fn flat(b: &mut GraphBuilder<'_>, x: Outlet) -> engine_graph::Result<Outlet> {
    let shape = b.fact(x)?.shape.clone();
    match shape.volume() {
        Some(v) => b.reshape(x, Shape(vec![v])),
        None => Err(engine_graph::GraphError::invalid("metric input", format!("cannot flatten {shape}"))),
    }
}

/// Class ids (any shape, integers or floats holding them) as one-hot rows `[N, classes]`.
pub(crate) fn one_hot_classes(b: &mut GraphBuilder<'_>, ids: Outlet, classes: usize) -> engine_graph::Result<Outlet> {
    let ids = flat(b, ids)?;
    let ids = if b.fact(ids)?.dtype == DType::I64 { ids } else { b.cast(ids, DType::I64)? };
    b.one_hot(ids, classes)
}

/// A 0/1 float version of a label or prediction: booleans as is, numbers as `x > threshold`
/// (threshold 0 for integers, as TensorFlow casts class ids to booleans).
pub(crate) fn as_indicator(b: &mut GraphBuilder<'_>, x: Outlet, threshold: f32) -> engine_graph::Result<Outlet> {
    let x = flat(b, x)?;
    let dtype = b.fact(x)?.dtype;
    let hit = match dtype {
        DType::Bool => x,
        DType::I64 => {
            let zero = b.constant(HostTensor::scalar_i64(0))?;
            b.greater(x, zero)?
        }
        DType::F32 => {
            let t = b.scalar(threshold)?;
            b.greater(x, t)?
        }
    };
    b.cast(hit, DType::F32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_merge_by_addition() {
        let mut a = MetricState::default();
        a.add(&[HostTensor::scalar_f32(3.0), HostTensor::scalar_f32(4.0)]);
        let mut b = MetricState::default();
        b.add(&[HostTensor::scalar_f32(1.0), HostTensor::scalar_f32(4.0)]);
        a.merge(&b);
        assert_eq!(a.sums, vec![vec![4.0], vec![8.0]]);
        assert_eq!(a.with_values(&a.flatten()), a);
    }
}
