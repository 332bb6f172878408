//! What a model function returns, validated as TensorFlow validates `EstimatorSpec`.

use crate::{EstimatorError, Mode, Result, hooks::SessionRunHook, metrics::Metric};
use engine_graph::{DType, Graph, Outlet, optimizer::OptimizerConfig};
use std::collections::BTreeMap;

/// How training updates the variables.
///
/// Declarative rather than an op the model function wires itself: the estimator derives
/// gradients, lets the distribution strategy rewrite them (all-reduce, placement), and only
/// then lowers the optimizer, which is what makes a strategy a compiler pass.
#[derive(Debug, Clone, PartialEq)]
pub enum TrainOp {
    Minimize(OptimizerConfig),
}

#[derive(Default)]
pub struct EstimatorSpec {
    pub mode: Option<Mode>,
    pub predictions: BTreeMap<String, Outlet>,
    pub loss: Option<Outlet>,
    pub train_op: Option<TrainOp>,
    pub eval_metric_ops: BTreeMap<String, Metric>,
    pub training_hooks: Vec<Box<dyn SessionRunHook>>,
    pub training_chief_hooks: Vec<Box<dyn SessionRunHook>>,
    pub evaluation_hooks: Vec<Box<dyn SessionRunHook>>,
    pub prediction_hooks: Vec<Box<dyn SessionRunHook>>,
}

impl EstimatorSpec {
    pub fn new(mode: Mode) -> Self {
        EstimatorSpec { mode: Some(mode), ..Default::default() }
    }

    /// TensorFlow's rules: training needs a loss and a train op, evaluation a loss,
    /// prediction at least one prediction; the loss is a scalar float; metric keys do not
    /// collide with `loss`.
    pub fn validate(&self, mode: Mode, graph: &Graph) -> Result<()> {
        let bad = |reason: String| EstimatorError::Spec { mode, reason };
        if let Some(m) = self.mode
            && m != mode
        {
            return Err(bad(format!("the model function was called for {mode} but returned a spec for {m}")));
        }
        match mode {
            Mode::Train if self.loss.is_none() || self.train_op.is_none() => {
                return Err(bad("training needs both a loss and a train_op".into()));
            }
            Mode::Eval if self.loss.is_none() => return Err(bad("evaluation needs a loss".into())),
            Mode::Predict if self.predictions.is_empty() => return Err(bad("prediction needs predictions".into())),
            _ => {}
        }
        if let Some(loss) = self.loss {
            let fact = graph.fact(loss)?;
            if fact.dtype != DType::F32 || fact.rank() != 0 {
                return Err(bad(format!("the loss must be a scalar f32, found {fact}")));
            }
        }
        for key in self.eval_metric_ops.keys() {
            if key == "loss" || key == "global_step" {
                return Err(bad(format!("metric name '{key}' is reserved")));
            }
        }
        Ok(())
    }
}
