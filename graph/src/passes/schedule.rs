//! Scheduling: the order in which a plan executes its nodes.

use crate::{Graph, NodeId, Result};

/// A topological order, deterministic for a given graph: among ready nodes the one created
/// first runs first. Creation order is forward pass, then backward pass from the loss
/// towards the inputs, then updates, so gradients of the last layers (and their
/// collectives) become ready early.
pub fn schedule(g: &Graph) -> Result<Vec<NodeId>> {
    g.topological_order()
}
