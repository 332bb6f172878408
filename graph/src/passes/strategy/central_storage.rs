//! Central storage: variables and their updates on the host, computation on the replicas.

use crate::{Graph, GraphBuilder, NodeId, Op, Outlet, Placement, Result, passes::Pass};
use std::collections::{BTreeMap, BTreeSet};

/// TensorFlow's CentralStorageStrategy as placement. Runs after the optimizer pass:
/// - on the host: every variable, everything computed from variables alone (the learning
///   rate from the global step, Adam's step size), and everything downstream of the
///   reduced gradients (the updates and their assignments): applied once per step, not per
///   replica;
/// - on the replicas: everything that depends on the input batch; constants go with their
///   consumers;
/// - a `Transfer` on every edge between the two: replicas read variables through one,
///   and the reduced gradients reach the host through one.
pub struct CentralStorage;

impl Pass for CentralStorage {
    fn name(&self) -> &str {
        "central-storage"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let order = g.topological_order()?;
        // Nodes that depend on a placeholder: batch computation.
        let mut batch: BTreeSet<NodeId> = BTreeSet::new();
        for &id in &order {
            let n = g.node(id);
            if matches!(n.op, Op::Placeholder(_)) || n.inputs.iter().any(|o| batch.contains(&o.node)) {
                batch.insert(id);
            }
        }
        // Downstream of a reduced gradient: the update.
        let mut update: BTreeSet<NodeId> = BTreeSet::new();
        // Non-optimizer updates (moving statistics) are committed where their variables
        // live, like the optimizer's.
        let grads: BTreeSet<Outlet> = g.roles.gradients.iter().chain(&g.roles.updates).map(|(_, o)| *o).collect();
        for &id in &order {
            if g.node(id).inputs.iter().any(|o| grads.contains(o) || update.contains(&o.node)) {
                update.insert(id);
            }
        }
        // Computed from variables (the learning rate from the global step): state.
        let mut state: BTreeSet<NodeId> = BTreeSet::new();
        for &id in &order {
            let n = g.node(id);
            if !batch.contains(&id)
                && (matches!(n.op, Op::Variable(_)) || n.inputs.iter().any(|o| state.contains(&o.node)))
            {
                state.insert(id);
            }
        }
        // Constant expressions live with their consumers: on the host only if every
        // consumer is there, so no transfer carries a constant.
        let mut on_host: BTreeSet<NodeId> = update.union(&state).copied().collect();
        for &id in order.iter().rev() {
            if batch.contains(&id) || state.contains(&id) || update.contains(&id) {
                continue;
            }
            let consumers = g.consumers(id);
            if !consumers.is_empty() && consumers.iter().all(|(c, _, _)| on_host.contains(c)) {
                on_host.insert(id);
            }
        }
        let host = |id: NodeId| on_host.contains(&id);
        for &id in &order {
            let placement = if host(id) { Placement::Host } else { Placement::Replica };
            g.set_placement(id, Some(placement));
        }
        // A transfer per crossing edge (one per source value and destination).
        let mut transfers: BTreeMap<(Outlet, bool), Outlet> = BTreeMap::new();
        for &id in &order {
            let inputs = g.node(id).inputs.clone();
            let to_host = host(id);
            for (i, src) in inputs.iter().enumerate() {
                if host(src.node) == to_host || matches!(g.node(id).op, Op::Transfer(_)) {
                    continue;
                }
                let t = match transfers.get(&(*src, to_host)) {
                    Some(t) => *t,
                    None => {
                        let label = if to_host { Placement::Host } else { Placement::Replica };
                        let src_name = g.node(src.node).name.clone();
                        let mut b = GraphBuilder::new(g);
                        let t = b.with_scope(&format!("transfer_to_{label}"), |b| {
                            let name = b.name(&src_name);
                            b.op_named(&name, crate::ops::Transfer { to: label }.into(), &[*src])
                        })?;
                        g.set_placement(t.node, Some(label));
                        transfers.insert((*src, to_host), t);
                        t
                    }
                };
                g.set_input(id, i, t);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        DType, Initializer, Shape,
        autodiff::Autodiff,
        ops::ReduceOp,
        optimizer::{ApplyOptimizer, LearningRate, Optimizer, OptimizerConfig},
        passes::strategy::AllReduceGradients,
    };

    #[test]
    fn variables_and_updates_live_on_the_host() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let w = b.variable("w", &[3, 2], Initializer::Ones, true)?;
        let y = b.matmul(x, w)?;
        let loss = b.reduce_mean(y, &[], false)?;
        g.roles.loss = Some(loss);
        g.roles.inputs.insert("x".into(), x);
        Autodiff.run(&mut g)?;
        AllReduceGradients { reduce: ReduceOp::Sum }.run(&mut g)?;
        let config = OptimizerConfig {
            optimizer: Optimizer::Sgd { momentum: 0.9, nesterov: false },
            learning_rate: LearningRate::Constant(0.1),
            clip_global_norm: None,
        };
        ApplyOptimizer { config }.run(&mut g)?;
        CentralStorage.run(&mut g)?;
        g.check()?;
        let device = |name: &str| g.find(name).map(|id| g.node(id).placement);
        assert_eq!(device("w")?, Some(Placement::Host));
        assert_eq!(device("w/Momentum")?, Some(Placement::Host));
        assert_eq!(device("x")?, Some(Placement::Replica));
        assert_eq!(device("global_step")?, Some(Placement::Host));
        // The matmul reads the variable through a transfer to the replica.
        let mm = g
            .nodes()
            .find(|(_, n)| n.op.name() == "MatMul" && n.placement == Some(Placement::Replica))
            .map(|(id, _)| id);
        let mm = mm.ok_or_else(|| crate::GraphError::invalid("test", "no replica matmul"))?;
        let src = g.node(mm).inputs[1];
        assert!(matches!(&g.node(src.node).op, Op::Transfer(t) if t.to == Placement::Replica));
        // Every assignment is on the host, and every host node reads host values.
        for (_, n) in g.nodes() {
            if matches!(n.op, Op::Assign(_)) {
                assert_eq!(n.placement, Some(Placement::Host));
            }
            if !matches!(n.op, Op::Transfer(_)) {
                for o in &n.inputs {
                    assert_eq!(
                        g.node(o.node).placement,
                        n.placement,
                        "{} reads {} across devices",
                        n.name,
                        g.node(o.node).name
                    );
                }
            }
        }
        Ok(())
    }
}
