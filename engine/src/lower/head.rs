//! The head: labels, loss and predictions on top of the model's output, as a canned
//! Estimator head does.

use super::{LowerError, Mode, build::Lowering};
use crate::spec::{ErrorKind, FieldPath, Loss, Metric};
use engine_graph::{DType, Dim, GraphBuilder, HostTensor, Outlet, Shape};
use std::collections::BTreeMap;

/// The feed name of the labels.
pub const LABELS: &str = "labels";

pub(super) struct Head {
    /// The logits the loss and predictions read: the model's output, or the input of its
    /// final softmax (sigmoid) when the loss takes probabilities (`from_logits: false`).
    pub logits: Outlet,
    pub labels: Option<Outlet>,
    pub loss: Option<Outlet>,
    pub regularization: Option<Outlet>,
    pub predictions: BTreeMap<String, Outlet>,
}

/// `output_path` is where the model's output is defined (errors about it point there).
pub(super) fn build(
    cx: &mut Lowering<'_, '_, '_>,
    logits: Outlet,
    output_path: &FieldPath,
) -> Result<Head, LowerError> {
    let loss_kind = cx.spec.job.loss.kind;
    let logits = logits_of(cx, logits, output_path)?;
    let shape = cx.shape_of(logits)?;
    let labels_shape = labels_shape(cx, loss_kind, &shape, output_path)?;
    check_metrics(cx, loss_kind, &shape)?;

    let scope = cx.b.unique_scope("head");
    let predictions =
        cx.b.with_scope(&scope, |b| predictions(b, loss_kind, logits)).map_err(|e| cx.graph_error(output_path, e))?;
    if cx.mode == Mode::Predict {
        return Ok(Head { logits, labels: None, loss: None, regularization: None, predictions });
    }
    let dtype = if loss_kind == Loss::SparseSoftmaxCrossEntropy { DType::I64 } else { DType::F32 };
    let labels = cx.labels(dtype, labels_shape, output_path)?;
    let regularizers = cx.regularizers.clone();
    let smoothing = cx.spec.job.label_smoothing;
    let sample_weights = cx.provided.and_then(|p| p.weights);
    let class_weights = match cx.mode {
        Mode::Train => class_weights(cx, &shape)?,
        _ => None,
    };
    let scope = cx.b.unique_scope("loss");
    let (loss, regularization) =
        cx.b.with_scope(&scope, |b| {
            let per_example = match loss_kind {
                Loss::SparseSoftmaxCrossEntropy if smoothing > 0.0 => {
                    // (1 - s) * CE(one-hot) + s * mean over classes of -log p: the
                    // cross-entropy against the smoothed labels, without a one-hot.
                    let hard = b.sparse_softmax_cross_entropy(logits, labels)?;
                    let log_p = b.log_softmax(logits, -1)?;
                    let mean_log_p = b.reduce_mean(log_p, &[1], false)?;
                    let keep = b.scalar(1.0 - smoothing)?;
                    let hard = b.mul(hard, keep)?;
                    let s = b.scalar(-smoothing)?;
                    let uniform = b.mul(mean_log_p, s)?;
                    b.add(hard, uniform)?
                }
                Loss::SparseSoftmaxCrossEntropy => b.sparse_softmax_cross_entropy(logits, labels)?,
                Loss::SoftmaxCrossEntropy => {
                    let classes = shape.dims().last().and_then(|d| d.known()).unwrap_or(1);
                    let labels = smooth(b, labels, smoothing, classes)?;
                    b.softmax_cross_entropy(logits, labels)?
                }
                Loss::SigmoidCrossEntropy => {
                    let labels = smooth(b, labels, smoothing, 2)?;
                    b.sigmoid_cross_entropy(logits, labels)?
                }
                Loss::MeanSquaredError => b.mean_squared_error(logits, labels)?,
            };
            let per_example = match class_weights.clone() {
                Some(table) => weigh_by_class(b, per_example, labels, loss_kind, table)?,
                None => per_example,
            };
            // Keras' sample_weight: each example's loss times its weight, still over the batch.
            let per_example = match sample_weights {
                Some(w) => b.with_scope("sample_weight", |b| {
                    // [N] against a per-example loss of [N, ...]: one weight per example.
                    let rank = b.fact(per_example)?.shape.rank();
                    let n = b.fact(w)?.shape.dim(0);
                    let mut dims = vec![n];
                    dims.resize(rank.max(1), Dim::Known(1));
                    let w = b.reshape(w, Shape(dims))?;
                    b.mul(per_example, w)
                })?,
                None => per_example,
            };
            // The mean over every element: over the batch, and for sigmoid losses over
            // the labels of each example too (TensorFlow's SUM_BY_NONZERO_WEIGHTS).
            let mean = b.reduce_mean(per_example, &[], false)?;
            if regularizers.is_empty() {
                return Ok((mean, None));
            }
            let reg = b.with_scope("regularization", |b| {
                let mut terms = Vec::new();
                for &(factor, w) in &regularizers {
                    let sq = b.square(w)?;
                    let sum = b.reduce_sum(sq, &[], false)?;
                    let f = b.scalar(factor)?;
                    terms.push(b.mul(f, sum)?);
                }
                if terms.len() == 1 { Ok(terms[0]) } else { b.add_n(&terms) }
            })?;
            Ok((b.add(mean, reg)?, Some(reg)))
        })
        .map_err(|e| cx.graph_error(output_path, e))?;
    Ok(Head { logits, labels: Some(labels), loss: Some(loss), regularization, predictions })
}

/// The logits under the model's output. With `from_logits: false` (Keras' default) the
/// output is probabilities and must be the loss's own squashing, a softmax over classes or
/// a sigmoid, whose input is taken instead (Keras takes the logits from under it too, for
/// a stable cross-entropy); anything else is refused at the output, since reading
/// probabilities as logits trains silently worse. With `from_logits: true` an output that
/// is already a softmax or sigmoid gets Keras' warning for the same reason.
fn logits_of(cx: &Lowering<'_, '_, '_>, output: Outlet, at: &FieldPath) -> Result<Outlet, LowerError> {
    let loss = cx.spec.job.loss;
    let squash = match loss.kind {
        Loss::SparseSoftmaxCrossEntropy | Loss::SoftmaxCrossEntropy => "Softmax",
        Loss::SigmoidCrossEntropy => "Sigmoid",
        Loss::MeanSquaredError => return Ok(output),
    };
    let node = cx.b.graph().node(output.node);
    let squashed = node.op.name() == squash && node.inputs.len() == 1;
    match (loss.from_logits, squashed) {
        (false, true) => Ok(node.inputs[0]),
        (false, false) => Err(cx.spec_error(at, ErrorKind::Invalid(format!(
            "{loss} reads the model's output as probabilities, as Keras does, but the output is a {} node, not a \
             {}: end the model with `activation: {squash}`, or write `from_logits: true` if it outputs logits",
            node.op.name(),
            squash.to_lowercase()
        ))).into()),
        (true, true) => {
            log::warn!(
                "{at}: the loss takes logits (from_logits: true) but the model's output is a {}, so it reads \
                 probabilities as logits and trains worse; drop the activation or write from_logits: false",
                squash.to_lowercase()
            );
            Ok(output)
        }
        (true, false) => Ok(output),
    }
}

/// The training spec's class weights as one weight per class of the model's output, or
/// `None` when it gives none; a class past the output's is a shape error naming the field.
fn class_weights(cx: &Lowering<'_, '_, '_>, logits: &Shape) -> Result<Option<HostTensor>, LowerError> {
    let given = &cx.spec.job.train_spec.class_weight;
    if given.is_empty() {
        return Ok(None);
    }
    let at = FieldPath::root().field("train_spec").field("class_weight");
    let classes = logits.dims().last().and_then(|d| d.known()).unwrap_or(0);
    let mut table = vec![1.0f32; classes];
    for (&class, &w) in given {
        let slot = usize::try_from(class).ok().and_then(|c| table.get_mut(c));
        let Some(slot) = slot else {
            return Err(cx.shape_error(
                &at,
                format!(
                    "class {class} is not one of the model's {classes} classes (0 to {})",
                    classes.saturating_sub(1)
                ),
            ));
        };
        *slot = w;
    }
    HostTensor::f32(vec![classes], table).map(Some).map_err(|e| cx.graph_error(&at, e))
}

/// Each example's loss times its class's weight: looked up by the label for integer labels,
/// `labels . weights` for probability labels (the class's weight for a one-hot label).
fn weigh_by_class(
    b: &mut GraphBuilder<'_>,
    per_example: Outlet,
    labels: Outlet,
    loss: Loss,
    table: HostTensor,
) -> engine_graph::Result<Outlet> {
    b.with_scope("class_weight", |b| {
        let table = b.constant(table)?;
        let weights = match loss {
            Loss::SparseSoftmaxCrossEntropy => b.gather(table, labels)?,
            _ => {
                let spread = b.mul(labels, table)?;
                b.reduce_sum(spread, &[1], false)?
            }
        };
        b.mul(per_example, weights)
    })
}

/// `labels * (1 - s) + s / classes`.
fn smooth(b: &mut GraphBuilder<'_>, labels: Outlet, s: f32, classes: usize) -> engine_graph::Result<Outlet> {
    if s == 0.0 {
        return Ok(labels);
    }
    let keep = b.scalar(1.0 - s)?;
    let kept = b.mul(labels, keep)?;
    let spread = b.scalar(s / classes as f32)?;
    b.add(kept, spread)
}

/// The labels each loss takes, or why the model's output does not suit the loss.
fn labels_shape(cx: &Lowering<'_, '_, '_>, loss: Loss, logits: &Shape, at: &FieldPath) -> Result<Shape, LowerError> {
    let batched = logits.dims().first().is_some_and(|d| d.is_batch());
    match loss {
        Loss::SparseSoftmaxCrossEntropy | Loss::SoftmaxCrossEntropy => match logits.dims() {
            [n, Dim::Known(c)] if n.is_batch() && *c >= 2 => Ok(if loss == Loss::SparseSoftmaxCrossEntropy {
                Shape(vec![*n])
            } else {
                logits.clone()
            }),
            _ => Err(cx.shape_error(
                at,
                format!("{} needs the model to output logits of shape [batch, classes] with at least 2 classes, got {logits}", loss.keras_name()),
            )),
        },
        Loss::SigmoidCrossEntropy | Loss::MeanSquaredError if batched && logits.rank() >= 2 => Ok(logits.clone()),
        _ => Err(cx.shape_error(at, format!("{} needs the model to output [batch, ...], got {logits}", loss.keras_name()))),
    }
}

/// Metrics whose fit depends on the number of classes.
fn check_metrics(cx: &Lowering<'_, '_, '_>, loss: Loss, logits: &Shape) -> Result<(), LowerError> {
    let classes = logits.dims().last().and_then(|d| d.known()).unwrap_or(0);
    for (i, m) in cx.spec.job.metrics.iter().enumerate() {
        let at = FieldPath::root().field("metrics").index(i);
        let why = match m {
            Metric::TopKAccuracy { k } if *k > classes => {
                Some((at.field("k"), format!("k = {k} exceeds the model's {classes} classes")))
            }
            _ => per_class_problem(m, loss, classes, &at),
        };
        if let Some((at, why)) = why {
            return Err(LowerError::Spec(cx.spec_error(&at, ErrorKind::Invalid(why))));
        }
    }
    Ok(())
}

/// What is wrong with a Precision, Recall or AUC's `class_id` and `average` for this model.
fn per_class_problem(m: &Metric, loss: Loss, classes: usize, at: &FieldPath) -> Option<(FieldPath, String)> {
    let (class_id, average) = match m {
        Metric::Precision { class_id, average }
        | Metric::Recall { class_id, average }
        | Metric::Auc { class_id, average } => (*class_id, *average),
        _ => return None,
    };
    match (class_id, average) {
        (Some(_), Some(_)) => Some((at.field("average"), "give class_id or average, not both".to_string())),
        (Some(_), None) if !loss.is_softmax() => {
            Some((at.field("class_id"), "class_id is for a softmax classifier's classes".to_string()))
        }
        (Some(k), None) if k >= classes => Some((
            at.field("class_id"),
            format!("class_id {k} is not one of the model's {classes} classes (0 to {})", classes.max(1) - 1),
        )),
        (None, Some(_)) if !loss.is_softmax() => {
            Some((at.field("average"), "average is for a softmax classifier's classes".to_string()))
        }
        (None, None) if loss.is_softmax() && classes != 2 => Some((
            at.clone(),
            format!(
                "`{}` of a {classes}-class model needs `class_id: K` (one class against the rest) or `average: \
                 Macro` (or `Micro`)",
                m.key()
            ),
        )),
        _ => None,
    }
}

fn predictions(b: &mut GraphBuilder<'_>, loss: Loss, logits: Outlet) -> engine_graph::Result<BTreeMap<String, Outlet>> {
    let mut p = BTreeMap::from([("logits".to_string(), logits)]);
    match loss {
        Loss::SparseSoftmaxCrossEntropy | Loss::SoftmaxCrossEntropy => {
            p.insert("probabilities".into(), b.softmax(logits, -1)?);
            p.insert("classes".into(), b.argmax(logits, -1)?);
        }
        Loss::SigmoidCrossEntropy => {
            p.insert("probabilities".into(), b.sigmoid(logits)?);
            let zero = b.scalar(0.0)?;
            let positive = b.greater(logits, zero)?;
            p.insert("classes".into(), b.cast(positive, DType::I64)?);
        }
        Loss::MeanSquaredError => {
            p.insert("predictions".into(), logits);
        }
    }
    Ok(p)
}
