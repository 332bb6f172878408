//! Liveness: when each intermediate value can be freed.

use crate::{Graph, NodeId, Outlet, Result};
use std::collections::{BTreeMap, BTreeSet};

/// For each position of a schedule, the outlets whose last reader runs there.
///
/// The executor drops a buffer right after its last use, and hands it by value to that
/// last reader, which lets a backend reuse the memory in place. Values a role points at
/// (the loss, predictions, fetches) live to the end of the step.
#[derive(Debug, Clone, Default)]
pub struct Liveness {
    /// `free_after[i]`: outlets to drop once `schedule[i]` has run.
    pub free_after: Vec<Vec<Outlet>>,
    /// For each `(position, input index)`, whether that read is the outlet's last.
    pub last_use: BTreeSet<(usize, usize)>,
}

pub fn liveness(g: &Graph, schedule: &[NodeId]) -> Result<Liveness> {
    let position: BTreeMap<NodeId, usize> = schedule.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let kept: BTreeSet<Outlet> = g.roles.outlets().into_iter().collect();
    let mut last: BTreeMap<Outlet, (usize, usize)> = BTreeMap::new();
    for (pos, &id) in schedule.iter().enumerate() {
        for (input, o) in g.node(id).inputs.iter().enumerate() {
            last.insert(*o, (pos, input));
        }
    }
    let mut free_after = vec![Vec::new(); schedule.len()];
    let mut last_use = BTreeSet::new();
    for (pos, &id) in schedule.iter().enumerate() {
        for output in 0..g.node(id).outputs.len() {
            let o = Outlet::new(id, output);
            if kept.contains(&o) {
                continue;
            }
            match last.get(&o) {
                Some(&(p, input)) => {
                    free_after[p].push(o);
                    // A value read twice by its last reader (Mul(x, x)) is not moved.
                    let reads = g.node(schedule[p]).inputs.iter().filter(|i| **i == o).count();
                    if reads == 1 {
                        last_use.insert((p, input));
                    }
                }
                None => free_after[pos].push(o),
            }
        }
    }
    for (pos, id) in schedule.iter().enumerate() {
        if position.get(id) != Some(&pos) {
            return Err(crate::GraphError::Inconsistent("schedule lists a node twice".into()));
        }
    }
    Ok(Liveness { free_after, last_use })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Shape, passes::schedule};

    #[test]
    fn frees_after_last_reader_and_keeps_roles() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let e = b.exp(x)?;
        let s = b.square(e)?;
        let y = b.mul(s, e)?;
        g.roles.inputs.insert("x".into(), x);
        g.roles.loss = Some(y);
        let order = schedule(&g)?;
        let l = liveness(&g, &order)?;
        let pos = |n: NodeId| order.iter().position(|&m| m == n).unwrap_or(usize::MAX);
        assert!(l.free_after[pos(y.node)].contains(&e), "exp dies at its last reader");
        assert!(l.free_after[pos(y.node)].contains(&s));
        assert!(!l.free_after.iter().flatten().any(|o| *o == x || *o == y), "roles live on");
        assert!(l.last_use.contains(&(pos(y.node), 1)));
        Ok(())
    }
}
