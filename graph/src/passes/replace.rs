//! What every pass that fuses a matched composite into one op does last.

use crate::{Graph, NodeId, Op, Outlet, Result};

/// Adds `op` reading `inputs`, named in the scope of node `scope_of` and placed where
/// `placed_like` is; the readers of `outputs[i]` read output `i` of the new node instead;
/// then the composite's `interior` nodes go, each listed before its inputs.
pub(super) fn replace_with_fused(
    g: &mut Graph,
    op: Op,
    inputs: Vec<Outlet>,
    scope_of: NodeId,
    placed_like: NodeId,
    outputs: &[Outlet],
    interior: Vec<NodeId>,
) -> Result<NodeId> {
    let placement = g.node(placed_like).placement;
    let scope = g.node(scope_of).name.rsplit_once('/').map(|(s, _)| format!("{s}/")).unwrap_or_default();
    let name = g.unique_name(&format!("{scope}{}", op.name()));
    let fused = g.add_node(name, op, inputs)?;
    g.set_placement(fused, placement);
    for (i, o) in outputs.iter().enumerate() {
        g.replace_uses(*o, Outlet::new(fused, i))?;
    }
    for id in interior {
        g.remove_node(id)?;
    }
    Ok(fused)
}
