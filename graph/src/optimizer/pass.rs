//! The optimizer pass: turns `roles.gradients` into update nodes and a train op.

use super::{Optimizer, OptimizerConfig, adagrad, adam, clip::clip_by_global_norm, momentum, rmsprop};
use crate::{Graph, GraphBuilder, GraphError, HostTensor, Outlet, Result, passes::Pass, row_sparse::touched_rows};

/// Appends, for every `(variable, gradient)` in `roles.gradients`, the optimizer's update
/// (restricted to the looked-up rows for a row-sparse gradient, where the optimizer's
/// sparse form in TensorFlow is), then the assignments of `roles.updates`, then the global step increment, grouped into
/// `roles.train_op`. The learning rate is
/// exposed as the fetch `learning_rate` for logs and summaries.
#[derive(Debug, Clone)]
pub struct ApplyOptimizer {
    pub config: OptimizerConfig,
}

impl Pass for ApplyOptimizer {
    fn name(&self) -> &str {
        "apply-optimizer"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        if g.roles.gradients.is_empty() {
            return Err(GraphError::invalid(
                "training graph",
                "no trainable variable receives a gradient from the loss",
            ));
        }
        let pairs = g.roles.gradients.clone();
        let mut b = GraphBuilder::new(g);
        let name = self.config.optimizer.name();
        let train_op = b.with_scope(name, |b| {
            let step = b.global_step()?;
            let lr = self.config.learning_rate.build(b, step)?;
            b.graph_mut().roles.fetches.insert("learning_rate".into(), lr);
            let mut grads: Vec<Outlet> = pairs.iter().map(|p| p.1).collect();
            if let Some(clip) = self.config.clip_global_norm {
                grads = clip_by_global_norm(b, &grads, clip)?;
            }
            let adam_lr = match self.config.optimizer {
                Optimizer::Adam { beta1, beta2, .. } | Optimizer::AdamW { beta1, beta2, .. } => {
                    Some(adam::corrected_lr(b, lr, step, beta1, beta2)?)
                }
                _ => None,
            };
            let mut assigns = Vec::new();
            for ((var, unclipped), grad) in pairs.iter().zip(grads) {
                let var = Outlet::from(*var);
                let touched = match self.config.optimizer.updates_touched_rows_only() {
                    true => touched_rows(b, *unclipped)?,
                    false => None,
                };
                let var_name = b.graph().node(var.node).name.clone();
                let updates = b.with_scope(&format!("update_{var_name}"), |b| match &self.config.optimizer {
                    Optimizer::Sgd { momentum: m, nesterov } => momentum::update(b, var, grad, lr, *m, *nesterov),
                    Optimizer::Adam { beta1, beta2, epsilon } => {
                        let p = adam::Params { beta1: *beta1, beta2: *beta2, epsilon: *epsilon, decay: None };
                        adam::update(b, var, grad, adam_lr.unwrap_or(lr), &p)
                    }
                    Optimizer::AdamW { beta1, beta2, epsilon, weight_decay } => {
                        let decay = Some((*weight_decay, lr));
                        let p = adam::Params { beta1: *beta1, beta2: *beta2, epsilon: *epsilon, decay };
                        adam::update(b, var, grad, adam_lr.unwrap_or(lr), &p)
                    }
                    Optimizer::RmsProp { decay, momentum, epsilon, centered, keras } => {
                        let p = rmsprop::Params {
                            decay: *decay,
                            momentum: *momentum,
                            epsilon: *epsilon,
                            centered: *centered,
                            keras: *keras,
                        };
                        rmsprop::update(b, var, grad, lr, &p)
                    }
                    Optimizer::Adagrad { initial_accumulator, epsilon } => {
                        adagrad::update(b, var, grad, lr, *initial_accumulator, *epsilon)
                    }
                })?;
                if let Some(mask) = touched {
                    for assign in &updates {
                        keep_untouched_rows(b, *assign, mask)?;
                    }
                }
                assigns.extend(updates);
            }
            // Moving statistics and other non-optimizer state, as computed (and, under a
            // data-parallel strategy, averaged) in this step.
            for (var, value) in b.graph().roles.updates.clone() {
                assigns.push(b.assign(Outlet::from(var), value)?);
            }
            let one = b.constant(HostTensor::scalar_i64(1))?;
            let next = b.add(step, one)?;
            assigns.push(b.assign(step, next)?);
            b.group("train_op", &assigns)
        })?;
        g.roles.train_op = Some(train_op);
        Ok(true)
    }
}

/// Makes `assign` (of a variable or slot shaped like the gradient's table) write its old
/// value back in the rows `mask` leaves out: `select(mask, new, old)`.
fn keep_untouched_rows(b: &mut GraphBuilder<'_>, assign: Outlet, mask: Outlet) -> Result<()> {
    let node = b.graph().node(assign.node);
    let (target, value) = (node.inputs[0], node.inputs[1]);
    let name = format!("{}/touched_rows", node.name);
    let kept = b.with_scope(&name, |b| b.select(mask, value, target))?;
    b.graph_mut().set_input(assign.node, 1, kept);
    Ok(())
}
