//! Row-sparse gradients: TensorFlow's `IndexedSlices`, recognized where they are made.
//!
//! The gradient of an embedding lookup (`Gather`) is a `ScatterAddRows` of the looked-up
//! rows into a table of zeros. Autodiff builds it densely so every pass and kernel can
//! treat it as an ordinary tensor; the passes for which the zeros matter look through it:
//! - strategies exchange the `(indices, updates)` pair, not the table (`AllGatherRows`
//!   replaces the all-reduce; a parameter-server worker sends the pair);
//! - the optimizer restricts stateful updates (momentum, RMSProp) to the looked-up rows,
//!   as TensorFlow's sparse apply ops do;
//! - the numerics check reads the updates, on the task that computed them.
//!
//! A gradient that is anything else (an embedding also regularized, a table read by two
//! lookups, whose gradients are added) is dense, and treated as such everywhere.

use crate::{Graph, GraphBuilder, Op, Outlet, Result};

/// The parts of a row-sparse gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSparse {
    pub indices: Outlet,
    pub updates: Outlet,
    pub rows: usize,
}

/// `Some` when `grad` is a `ScatterAddRows`' output: the rows and what is added to them.
pub fn row_sparse(g: &Graph, grad: Outlet) -> Option<RowSparse> {
    let node = g.node(grad.node);
    match &node.op {
        Op::ScatterAddRows(s) if grad.output == 0 => {
            Some(RowSparse { indices: node.inputs[0], updates: node.inputs[1], rows: s.rows })
        }
        _ => None,
    }
}

/// The mask of the rows a gradient touches (bool, broadcasting over the variable), when it
/// is row-sparse: the second output of an `AllGatherRows`, or a new `RowsTouched` next to a
/// `ScatterAddRows`. `None` for a dense gradient.
pub fn touched_rows(b: &mut GraphBuilder<'_>, grad: Outlet) -> Result<Option<Outlet>> {
    let node = b.graph().node(grad.node);
    if let Op::AllGatherRows(_) = node.op
        && grad.output == 0
    {
        return Ok(Some(Outlet::new(grad.node, 1)));
    }
    match row_sparse(b.graph(), grad) {
        Some(s) => Ok(Some(b.rows_touched(s.indices, s.updates, s.rows)?)),
        None => Ok(None),
    }
}
