//! The hyperparameters TensorBoard's HParams dashboard shows for a run, read from its spec.

use crate::spec::{OptimizerSpec, Spec, input_batch_size};
use engine_estimator::summary::HParam;
use engine_graph::optimizer::LearningRate;
use std::collections::BTreeMap;

/// Optimizer, learning rate (its schedule and starting value), batch, loss, steps; the
/// estimator adds the strategy and the seed.
pub fn hparams(spec: &Spec) -> BTreeMap<String, HParam> {
    let job = &spec.job;
    let optimizer = match &job.optimizer {
        OptimizerSpec::Sgd(o) if o.momentum > 0.0 => "Momentum",
        OptimizerSpec::Sgd(_) => "SGD",
        OptimizerSpec::Adam(_) => "Adam",
        OptimizerSpec::AdamW(_) => "AdamW",
        OptimizerSpec::RmsProp(_) => "RMSprop",
        OptimizerSpec::Adagrad(_) => "Adagrad",
    };
    let (schedule, rate) = schedule(job.optimizer.learning_rate());
    let mut out = BTreeMap::from([
        ("optimizer".to_string(), HParam::Text(optimizer.into())),
        ("learning_rate".to_string(), HParam::Number(rate)),
        ("learning_rate_schedule".to_string(), HParam::Text(schedule.into())),
        ("loss".to_string(), HParam::Text(job.loss.kind.keras_name().into())),
    ]);
    if let Some(batch) = input_batch_size(spec, &job.train_input) {
        out.insert("batch_size".into(), HParam::Number(batch as f64));
    }
    if let Some(steps) = job.train_spec.max_steps {
        out.insert("max_steps".into(), HParam::Number(steps as f64));
    }
    if job.label_smoothing > 0.0 {
        out.insert("label_smoothing".into(), HParam::Number(f64::from(job.label_smoothing)));
    }
    out
}

/// The schedule's name and its rate at step 0 (a warmup's target: the rate it rises to).
fn schedule(lr: &LearningRate) -> (&'static str, f64) {
    match lr {
        LearningRate::Constant(x) => ("Constant", f64::from(*x)),
        LearningRate::ExponentialDecay { initial, .. } => ("ExponentialDecay", f64::from(*initial)),
        LearningRate::PiecewiseConstant { values, .. } => {
            ("PiecewiseConstant", values.first().copied().map(f64::from).unwrap_or(0.0))
        }
        LearningRate::CosineDecay { initial, .. } => ("CosineDecay", f64::from(*initial)),
        LearningRate::LinearWarmup { then, .. } => ("LinearWarmup", schedule(then).1),
        LearningRate::ReducedOnPlateau { then, .. } => schedule(then),
    }
}
