//! Common-subexpression elimination: merge pure nodes that compute the same value.

use super::Pass;
use crate::{Graph, NodeId, Outlet, Result};

/// Two nodes are the same computation when their ops are equal, pure, and they read the
/// same outlets. Visiting in topological order lets merges cascade (two equal `MatMul`s
/// over two equal `Transpose`s collapse in one run). The surviving node is the earlier one,
/// so names in logs stay the forward pass's names.
#[derive(Debug, Default)]
pub struct CommonSubexpressionElimination;

impl Pass for CommonSubexpressionElimination {
    fn name(&self) -> &str {
        "common-subexpression-elimination"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut kept: Vec<NodeId> = Vec::new();
        let mut changed = false;
        for id in g.topological_order()? {
            let node = g.node(id);
            if !node.op.is_pure() {
                continue;
            }
            let twin = kept.iter().copied().find(|&k| {
                let other = g.node(k);
                // Equal computations on different devices are not the same value: merging
                // them would create an edge between devices without a transfer.
                other.inputs == node.inputs && other.op == node.op && other.placement == node.placement
            });
            match twin {
                Some(t) => {
                    for i in 0..g.node(id).outputs.len() {
                        g.replace_uses(Outlet::new(id, i), Outlet::new(t, i))?;
                    }
                    g.remove_node(id)?;
                    changed = true;
                }
                None => kept.push(id),
            }
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Shape};

    #[test]
    fn merges_equal_pure_nodes_and_cascades() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let a1 = b.exp(x)?;
        let a2 = b.exp(x)?;
        let s1 = b.square(a1)?;
        let s2 = b.square(a2)?;
        let y = b.add(s1, s2)?;
        g.roles.loss = Some(y);
        assert!(CommonSubexpressionElimination.run(&mut g)?);
        assert_eq!(g.len(), 4, "x, exp, square, add remain");
        assert_eq!(g.node(y.node).inputs[0], g.node(y.node).inputs[1]);
        g.check()
    }

    #[test]
    fn never_merges_placeholders() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let y = b.placeholder("y", DType::F32, Shape::batched(&[3]))?;
        let z = b.add(x, y)?;
        g.roles.loss = Some(z);
        assert!(!CommonSubexpressionElimination.run(&mut g)?);
        Ok(())
    }
}
