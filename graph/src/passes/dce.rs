//! Dead-code elimination: drop every node no role depends on.

use super::Pass;
use crate::{Graph, NodeId, Op, Result};
use std::collections::BTreeSet;

/// Removes nodes that nothing in `roles` reaches. Variables are always kept: the set of
/// variables a checkpoint holds must not depend on which outputs a graph happens to use.
#[derive(Debug, Default)]
pub struct DeadCodeElimination;

impl Pass for DeadCodeElimination {
    fn name(&self) -> &str {
        "dead-code-elimination"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut live: BTreeSet<NodeId> = BTreeSet::new();
        let mut stack: Vec<NodeId> = g.roles.outlets().iter().map(|o| o.node).collect();
        stack.extend(g.variables());
        while let Some(n) = stack.pop() {
            if live.insert(n) {
                stack.extend(g.node(n).inputs.iter().map(|o| o.node));
            }
        }
        let dead: Vec<NodeId> = g.node_ids().filter(|n| !live.contains(n)).collect();
        // Remove consumers before producers.
        let order = g.topological_order()?;
        let mut changed = false;
        for id in order.into_iter().rev() {
            if dead.contains(&id) && !matches!(g.node(id).op, Op::Variable(_)) {
                g.remove_node(id)?;
                changed = true;
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
    fn removes_only_what_no_role_reaches() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let used = b.exp(x)?;
        let unused = b.log(x)?;
        let _unused2 = b.neg(unused)?;
        g.roles.inputs.insert("x".into(), x);
        g.roles.loss = Some(used);
        assert!(DeadCodeElimination.run(&mut g)?);
        assert_eq!(g.len(), 2);
        assert!(!DeadCodeElimination.run(&mut g)?);
        g.check()
    }
}
