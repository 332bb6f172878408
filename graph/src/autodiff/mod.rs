//! Reverse-mode automatic differentiation as a graph rewrite.
//!
//! The backward pass is appended to the same graph as ordinary nodes, so it is optimized,
//! scheduled, placed and distributed like the forward pass (the approach of luminal and of
//! TensorFlow's `tf.gradients`). Only what is needed is built: a node gets backward nodes
//! only if it lies on a float path from one of the requested sources to the loss, and an
//! op computes an input's gradient only when [`GradCtx::needs`] says so (no input
//! gradient for a first convolution whose input is a placeholder).

mod context;
mod pass;

pub use context::GradCtx;
pub use pass::Autodiff;

use crate::{Graph, GraphBuilder, GraphError, NodeId, Outlet, Result, ops::Constant};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Appends the nodes computing `d y / d x` for every `x` in `xs` and returns them in the
/// same order (`None` where `y` does not depend on `x`). `y` must be a scalar f32.
pub fn gradients(graph: &mut Graph, y: Outlet, xs: &[Outlet]) -> Result<Vec<Option<Outlet>>> {
    let y_fact = graph.fact(y)?.clone();
    if !y_fact.dtype.is_float() || y_fact.rank() != 0 {
        return Err(GraphError::LossNotScalar { node: graph.node(y.node).name.clone(), fact: y_fact });
    }
    let active = active_nodes(graph, y, xs)?;
    let order: Vec<NodeId> = graph.topological_order()?.into_iter().filter(|n| active.contains(n)).rev().collect();

    let mut b = GraphBuilder::new(graph);
    let seed = b.with_scope("gradients", |b| b.op_named(&b.name("grad_ys"), Constant::scalar(1.0).into(), &[]))?;
    let mut contributions: BTreeMap<Outlet, Vec<Outlet>> = BTreeMap::new();
    contributions.insert(y, vec![seed]);

    for id in order {
        let node = b.graph().node(id).clone();
        let scope = format!("gradients/{}_grad", node.name);
        let mut out_grads = Vec::with_capacity(node.outputs.len());
        for i in 0..node.outputs.len() {
            let parts = contributions.remove(&Outlet::new(id, i)).unwrap_or_default();
            out_grads.push(sum_parts(&mut b, &scope, parts)?);
        }
        if out_grads.iter().all(Option::is_none) {
            continue;
        }
        let stops = node.op.def().stops_gradient();
        let needs: Vec<bool> = node
            .inputs
            .iter()
            .map(|o| {
                !stops && active.contains(&o.node) && b.graph().fact(*o).map(|f| f.dtype.is_float()).unwrap_or(false)
            })
            .collect();
        if !needs.iter().any(|&n| n) {
            // A source the caller asked about: its gradient is what arrived at its outputs.
            for (i, g) in out_grads.into_iter().enumerate() {
                if let Some(g) = g {
                    contributions.insert(Outlet::new(id, i), vec![g]);
                }
            }
            continue;
        }
        let input_grads = b.with_scope(&scope, |b| {
            let mut ctx = GradCtx::new(b, id, node.inputs.clone(), out_grads.clone(), needs.clone());
            node.op.def().grad(&mut ctx)?;
            ctx.finish()
        })?;
        for (i, g) in input_grads.into_iter().enumerate() {
            if let Some(g) = g {
                contributions.entry(node.inputs[i]).or_default().push(g);
            }
        }
        // Keep what reached this node's outputs if the caller asked for them.
        for (i, g) in out_grads.into_iter().enumerate() {
            if let Some(g) = g
                && xs.contains(&Outlet::new(id, i))
            {
                contributions.insert(Outlet::new(id, i), vec![g]);
            }
        }
    }

    let mut out = Vec::with_capacity(xs.len());
    for x in xs {
        let parts = contributions.get(x).cloned().unwrap_or_default();
        let scope = format!("gradients/{}_grad", b.graph().node(x.node).name);
        out.push(sum_parts(&mut b, &scope, parts)?);
    }
    Ok(out)
}

fn sum_parts(b: &mut GraphBuilder<'_>, scope: &str, parts: Vec<Outlet>) -> Result<Option<Outlet>> {
    match parts.len() {
        0 => Ok(None),
        1 => Ok(Some(parts[0])),
        _ => b.with_scope(scope, |b| b.add_n(&parts)).map(Some),
    }
}

/// Nodes on a float path from some `x` to `y`.
fn active_nodes(graph: &Graph, y: Outlet, xs: &[Outlet]) -> Result<BTreeSet<NodeId>> {
    let mut reaches_y: BTreeSet<NodeId> = BTreeSet::new();
    let mut queue: VecDeque<NodeId> = VecDeque::from([y.node]);
    while let Some(n) = queue.pop_front() {
        if !reaches_y.insert(n) || graph.node(n).op.def().stops_gradient() {
            continue;
        }
        for o in &graph.node(n).inputs {
            if graph.fact(*o)?.dtype.is_float() {
                queue.push_back(o.node);
            }
        }
    }
    let mut from_x: BTreeSet<NodeId> = BTreeSet::new();
    let mut queue: VecDeque<NodeId> = xs.iter().map(|o| o.node).collect();
    while let Some(n) = queue.pop_front() {
        if !from_x.insert(n) {
            continue;
        }
        for (consumer, _, output) in graph.consumers(n) {
            if graph.fact(Outlet::new(n, output))?.dtype.is_float() {
                queue.push_back(consumer);
            }
        }
    }
    Ok(reaches_y.intersection(&from_x).copied().collect())
}
