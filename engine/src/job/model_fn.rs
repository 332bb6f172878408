//! A spec's model, loss, optimizer and metrics as an Estimator model function.

use crate::{
    lower::{self, ProvidedInputs},
    spec::{Average, Loss, Metric as SpecMetric, Spec},
};
use engine_estimator::{
    EstimatorError, EstimatorSpec, Features, Mode, ModelFn, Params, TrainOp,
    metrics::{Metric, Select},
};
use engine_graph::{GraphBuilder, Outlet};
use std::sync::Arc;

pub struct SpecModelFn {
    spec: Arc<Spec>,
    seed: u64,
}

impl SpecModelFn {
    pub fn new(spec: Arc<Spec>, seed: u64) -> Self {
        SpecModelFn { spec, seed }
    }
}

fn lower_mode(mode: Mode) -> lower::Mode {
    match mode {
        Mode::Train => lower::Mode::Train,
        Mode::Eval => lower::Mode::Eval,
        Mode::Predict => lower::Mode::Predict,
    }
}

impl ModelFn for SpecModelFn {
    fn build(
        &self,
        features: &Features,
        labels: Option<Outlet>,
        mode: Mode,
        _: &Params,
        b: &mut GraphBuilder<'_>,
    ) -> engine_estimator::Result<EstimatorSpec> {
        let provided = ProvidedInputs::new(features.clone(), labels);
        let m = lower::build_model_on(&self.spec, lower_mode(mode), b, self.seed, Some(&provided))
            .map_err(|e| EstimatorError::Model(Box::new(e)))?;
        let mut spec = EstimatorSpec::new(mode);
        spec.predictions = m.predictions.clone();
        spec.loss = m.loss;
        if mode == Mode::Train {
            spec.train_op = Some(TrainOp::Minimize(super::optimizer_config(&self.spec)));
        }
        if mode == Mode::Eval
            && let Some(labels) = m.labels
        {
            for metric in &self.spec.job.metrics {
                if let Some(built) =
                    metric_of(metric, self.spec.job.loss.kind, labels, &m, b).map_err(EstimatorError::Graph)?
                {
                    spec.eval_metric_ops.insert(metric.key(), built);
                }
            }
        }
        Ok(spec)
    }
}

/// The estimator metric for a spec metric name, on the head's predictions.
fn metric_of(
    metric: &SpecMetric,
    loss: Loss,
    labels: Outlet,
    m: &lower::ModelGraph,
    b: &mut GraphBuilder<'_>,
) -> engine_graph::Result<Option<Metric>> {
    let p = |k: &str| m.predictions.get(k).copied();
    let (Some(scores), Some(classes)) = (p("probabilities").or(p("predictions")), p("classes").or(p("predictions")))
    else {
        return Ok(None);
    };
    // Classification metrics compare class ids: a one-hot (or soft) label is its largest
    // class, as Keras' CategoricalAccuracy takes it.
    let labels = match (loss, metric) {
        (Loss::SoftmaxCrossEntropy, SpecMetric::MeanSquaredError | SpecMetric::Mean) => labels,
        (Loss::SoftmaxCrossEntropy, _) => b.argmax(labels, -1)?,
        _ => labels,
    };
    Ok(Some(match metric {
        SpecMetric::Accuracy => Metric::Accuracy { labels, predictions: classes },
        SpecMetric::Precision { class_id: None, average: None } => {
            Metric::Precision { labels, predictions: classes, threshold: 0.5 }
        }
        SpecMetric::Recall { class_id: None, average: None } => {
            Metric::Recall { labels, predictions: classes, threshold: 0.5 }
        }
        SpecMetric::Auc { class_id: None, average: None } => {
            Metric::Auc { labels, predictions: positive_scores(loss, scores, b)?, num_thresholds: 200 }
        }
        SpecMetric::Precision { class_id, average }
        | SpecMetric::Recall { class_id, average }
        | SpecMetric::Auc { class_id, average } => {
            let num_classes = b.fact(m.logits)?.shape.dims().last().and_then(|d| d.known()).unwrap_or(0);
            let select = match (class_id, average) {
                (Some(k), _) => Select::Class(*k),
                (None, Some(Average::Micro)) => Select::Micro,
                _ => Select::Macro,
            };
            match metric {
                SpecMetric::Auc { .. } => {
                    Metric::MultiClassAuc { labels, probabilities: scores, num_classes, num_thresholds: 200, select }
                }
                _ => Metric::PerClass {
                    labels,
                    classes,
                    num_classes,
                    select,
                    recall: matches!(metric, SpecMetric::Recall { .. }),
                },
            }
        }
        SpecMetric::ConfusionMatrix => {
            let num_classes = b.fact(m.logits)?.shape.dims().last().and_then(|d| d.known()).unwrap_or(0);
            Metric::ConfusionMatrix { labels, classes, num_classes }
        }
        SpecMetric::MeanSquaredError => Metric::MeanSquaredError { labels, predictions: scores },
        SpecMetric::TopKAccuracy { k } => Metric::TopKAccuracy { labels, logits: m.logits, k: *k },
        SpecMetric::Mean => match m.loss {
            Some(loss) => Metric::Mean { values: loss },
            None => return Ok(None),
        },
    }))
}

/// For AUC: the positive class's probability. A two-class softmax's is its second column
/// (the lowering refuses AUC for more classes).
fn positive_scores(loss: Loss, scores: Outlet, b: &mut GraphBuilder<'_>) -> engine_graph::Result<Outlet> {
    match loss {
        Loss::SparseSoftmaxCrossEntropy | Loss::SoftmaxCrossEntropy => b.slice(scores, &[0, 1], &[None, Some(1)]),
        _ => Ok(scores),
    }
}
