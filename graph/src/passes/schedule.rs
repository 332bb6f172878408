//! Scheduling: the order in which a plan executes its nodes.

use crate::{Graph, NodeId, Result};
use std::collections::{BTreeMap, BTreeSet};

/// A topological order, deterministic for a given graph. Among ready nodes, a collective
/// goes first (so its communication is launched while the rest of the backward pass
/// computes), then the node created first: creation order is forward pass, then backward
/// pass from the loss towards the inputs, then updates, so the last layers' gradients,
/// and the buckets that carry them, are ready early.
pub fn schedule(g: &Graph) -> Result<Vec<NodeId>> {
    let mut indegree: BTreeMap<NodeId, usize> = BTreeMap::new();
    for (id, node) in g.nodes() {
        let distinct: BTreeSet<NodeId> = node.inputs.iter().map(|o| o.node).collect();
        indegree.insert(id, distinct.len());
    }
    // Ready nodes keyed by (not a collective, id): collectives sort first.
    let key = |id: NodeId| (!g.node(id).op.is_collective(), id);
    let mut ready: BTreeSet<(bool, NodeId)> = indegree.iter().filter(|(_, d)| **d == 0).map(|(i, _)| key(*i)).collect();
    let mut order = Vec::with_capacity(g.len());
    while let Some((_, id)) = ready.pop_first() {
        order.push(id);
        let targets: BTreeSet<NodeId> = g.consumers(id).into_iter().map(|c| c.0).collect();
        for t in targets {
            if let Some(d) = indegree.get_mut(&t) {
                *d -= 1;
                if *d == 0 {
                    ready.insert(key(t));
                }
            }
        }
    }
    if order.len() != g.len() {
        return g.topological_order();
    }
    Ok(order)
}
