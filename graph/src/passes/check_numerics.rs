//! Checks every gradient and every update of a training step for NaN and infinity before
//! anything is committed to the variables.

use crate::{DType, Graph, GraphBuilder, NodeId, Op, Result, passes::Pass, row_sparse::row_sparse};

/// Runs after the optimizer pass. Wraps in a [`CheckNumerics`](crate::ops::CheckNumerics):
/// - each gradient of `roles.gradients` (as reduced by the strategy: the value the
///   optimizer reads, identical on every replica), ranked in model order, so a report can
///   name the first variable whose gradient is not finite;
/// - each new value an `Assign` commits (variables and optimizer slots), ranked after the
///   gradients: a finite gradient can still make a non-finite update (an overflowing
///   learning rate, a zero epsilon).
///
/// The executor commits a step's assignments only when every check passed, so a NaN in
/// the input or a diverging step never reaches the weights; the training loop then stops
/// or skips the batch. `roles.gradients` keeps pointing at the unchecked gradients: the
/// checks read them, so placement passes (central storage) put the checks with the
/// updates, in the partition that owns the variables and commits.
pub struct CheckNumericsPass;

impl Pass for CheckNumericsPass {
    fn name(&self) -> &str {
        "check-numerics"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let already = g.nodes().any(|(_, n)| matches!(n.op, Op::CheckNumerics(_)));
        if already || g.roles.train_op.is_none() {
            return Ok(false);
        }
        let gradients = g.roles.gradients.clone();
        let mut order = 0;
        for (var, grad) in &gradients {
            // A row-sparse gradient is checked in its updates: where they are computed, so
            // a parameter-server worker checks what it sends rather than the ps the table.
            let grad = &row_sparse(g, *grad).map_or(*grad, |s| s.updates);
            if g.fact(*grad)?.dtype != DType::F32 {
                continue;
            }
            let consumers = g.outlet_consumers(*grad);
            let var_name = g.node(*var).name.clone();
            let mut b = GraphBuilder::new(g);
            let checked = b.with_scope(&format!("check_numerics/{var_name}/gradient"), |b| {
                b.check_numerics(*grad, &format!("gradient of {var_name}"), order)
            })?;
            for (consumer, input) in consumers {
                g.set_input(consumer, input, checked);
            }
            order += 1;
        }
        // Assignments in the order of their variables' creation: the same on every replica.
        let mut assigns: Vec<(NodeId, NodeId)> =
            g.nodes().filter(|(_, n)| matches!(n.op, Op::Assign(_))).map(|(id, n)| (n.inputs[0].node, id)).collect();
        assigns.sort();
        for (var, assign) in assigns {
            let value = g.node(assign).inputs[1];
            if g.fact(value)?.dtype != DType::F32 {
                continue;
            }
            let var_name = g.node(var).name.clone();
            let mut b = GraphBuilder::new(g);
            let checked = b.with_scope(&format!("check_numerics/{var_name}/update"), |b| {
                b.check_numerics(value, &format!("update of {var_name}"), order)
            })?;
            g.set_input(assign, 1, checked);
            order += 1;
        }
        Ok(order > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Initializer, Outlet, Shape,
        autodiff::Autodiff,
        optimizer::{ApplyOptimizer, LearningRate, Optimizer, OptimizerConfig},
    };

    fn trained(optimizer: Optimizer) -> Result<Graph> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let w = b.variable("w", &[3, 2], Initializer::Ones, true)?;
        let v = b.variable("v", &[2], Initializer::Zeros, true)?;
        let y = b.matmul(x, w)?;
        let y = b.add(y, v)?;
        let loss = b.reduce_mean(y, &[], false)?;
        g.roles.loss = Some(loss);
        Autodiff.run(&mut g)?;
        ApplyOptimizer {
            config: OptimizerConfig { optimizer, learning_rate: LearningRate::Constant(0.1), clip_global_norm: None },
        }
        .run(&mut g)?;
        Ok(g)
    }

    fn checks(g: &Graph) -> Vec<(String, usize, Outlet)> {
        let mut v: Vec<_> = g
            .nodes()
            .filter_map(|(_, n)| match &n.op {
                Op::CheckNumerics(c) => Some((c.message.clone(), c.order, n.inputs[0])),
                _ => None,
            })
            .collect();
        v.sort_by_key(|c| c.1);
        v
    }

    #[test]
    fn gradients_come_first_in_model_order_then_every_float_update() -> Result<()> {
        let mut g = trained(Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 })?;
        let gradients = g.roles.gradients.clone();
        assert!(CheckNumericsPass.run(&mut g)?);
        g.check()?;
        let found = checks(&g);
        let messages: Vec<&str> = found.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(&messages[..2], ["gradient of w", "gradient of v"]);
        // Each variable and both Adam slots of each; global_step (an integer) is not checked.
        let updates: Vec<&str> = messages[2..].to_vec();
        assert_eq!(updates.len(), 6, "{updates:?}");
        assert!(updates.iter().all(|m| m.starts_with("update of ")), "{updates:?}");
        assert!(!updates.iter().any(|m| m.contains("global_step")), "{updates:?}");
        // The checks read the gradients, which the roles still name; nothing else does.
        assert_eq!(g.roles.gradients, gradients);
        for (k, (_, grad)) in gradients.iter().enumerate() {
            assert_eq!(found[k].2, *grad);
            let readers = g.outlet_consumers(*grad);
            assert_eq!(readers.len(), 1, "{readers:?}");
            assert!(matches!(g.node(readers[0].0).op, Op::CheckNumerics(_)));
        }
        // Every assignment of a float commits a checked value.
        for (_, n) in g.nodes().filter(|(_, n)| matches!(n.op, Op::Assign(_))) {
            let value = n.inputs[1];
            let checked = matches!(g.node(value.node).op, Op::CheckNumerics(_));
            assert_eq!(checked, g.fact(value)?.dtype == DType::F32, "{}", n.name);
        }
        Ok(())
    }

    #[test]
    fn a_second_run_and_a_graph_without_training_change_nothing() -> Result<()> {
        let mut g = trained(Optimizer::Sgd { momentum: 0.0, nesterov: false })?;
        assert!(CheckNumericsPass.run(&mut g)?);
        let n = g.len();
        assert!(!CheckNumericsPass.run(&mut g)?);
        assert_eq!(g.len(), n);
        let mut eval = Graph::new();
        let mut b = GraphBuilder::new(&mut eval);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        eval.roles.loss = Some(x);
        assert!(!CheckNumericsPass.run(&mut eval)?);
        Ok(())
    }
}
