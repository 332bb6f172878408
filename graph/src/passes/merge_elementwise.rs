//! Multi-output fusion: a `_FusedElementwise` read by another one joins its reader's pass,
//! its result leaving as a side output where something else reads it too.
//!
//! `FuseElementwise` grows trees, so a value read twice ends a tree. An optimizer's moment
//! is read twice: by its `Assign` (and check) and by the variable's update. So momentum's
//! accumulator and the new variable were two passes over memory, the second reading back
//! what the first had just written, and Adam's two moments and update three, each reading
//! the gradient again. XLA's multi-output fusion merges such producer-consumer pairs; here
//! the consumer's program is appended to the producer's, and every value another node reads
//! is written as an output of the one pass. On the MLP's first layer (0.8 MB per tensor)
//! that is one read of the accumulator less; on the residual model's hidden layer, Adam
//! with an L2 penalty, the gradient, the moments and the variable read once each.

use super::Pass;
use crate::{
    Graph, NodeId, Op, Outlet, Result,
    ops::{FusedElementwise, Instr, Operand, is_single},
};
use std::collections::HashSet;

/// Most outputs, full-size inputs and single-element inputs one merged pass may have: the
/// device kernel's slots (`runtime/src/kernels/elementwise_kernel.rs`), so that a merged
/// pass never falls back to running op by op on a GPU.
pub const MAX_OUTPUTS: usize = 4;
pub const MAX_FULL_INPUTS: usize = 8;
pub const MAX_SINGLE_INPUTS: usize = 8;

/// Runs after `FuseElementwise`. Merges a fused node into a fused reader of the same shape
/// and placement, unless another reader of it is upstream of that reader (the merged node
/// would then feed itself) or the merged pass would exceed the limits above. Repeats until
/// nothing merges, so a chain (an L2 penalty's gradient into Adam's moments into the
/// update) becomes one pass.
#[derive(Debug, Default)]
pub struct MergeElementwise;

impl Pass for MergeElementwise {
    fn name(&self) -> &str {
        "merge-elementwise"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        loop {
            let mut merged = false;
            for id in g.topological_order()? {
                if g.contains(id) && merge_into(g, id)? {
                    merged = true;
                }
            }
            if !merged {
                return Ok(changed);
            }
            changed = true;
        }
    }
}

fn fused(g: &Graph, id: NodeId) -> Option<&FusedElementwise> {
    match &g.node(id).op {
        Op::FusedElementwise(f) => Some(f),
        _ => None,
    }
}

/// Merges the first fused producer of `reader` that may be merged; whether one was.
fn merge_into(g: &mut Graph, reader: NodeId) -> Result<bool> {
    if fused(g, reader).is_none() {
        return Ok(false);
    }
    let mut producers: Vec<NodeId> = g.node(reader).inputs.iter().map(|o| o.node).collect();
    producers.sort_unstable();
    producers.dedup();
    let upstream = ancestors(g, reader);
    for producer in producers {
        if let Some(merge) = plan(g, producer, reader, &upstream)? {
            apply(g, producer, reader, merge)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Every node `id` depends on.
fn ancestors(g: &Graph, id: NodeId) -> HashSet<NodeId> {
    let mut seen = HashSet::new();
    let mut stack: Vec<NodeId> = g.node(id).inputs.iter().map(|o| o.node).collect();
    while let Some(n) = stack.pop() {
        if seen.insert(n) {
            stack.extend(g.node(n).inputs.iter().map(|o| o.node));
        }
    }
    seen
}

/// The merged node, before it is added: its op, inputs, and for each of the producer's
/// outputs another node reads, which output of the merged node it becomes.
struct Merge {
    op: FusedElementwise,
    inputs: Vec<Outlet>,
    producer_outputs: Vec<(usize, usize)>,
}

fn plan(g: &Graph, producer: NodeId, reader: NodeId, upstream: &HashSet<NodeId>) -> Result<Option<Merge>> {
    let (Some(p), Some(r)) = (fused(g, producer), fused(g, reader)) else { return Ok(None) };
    let (pn, rn) = (g.node(producer), g.node(reader));
    if pn.placement != rn.placement || g.fact(Outlet::from(producer))? != g.fact(Outlet::from(reader))? {
        return Ok(None);
    }
    // Another reader of the producer upstream of `reader` would read the merged node's
    // output and feed it: a cycle.
    let others: Vec<(NodeId, usize)> =
        g.consumers(producer).into_iter().filter(|c| c.0 != reader).map(|c| (c.0, c.2)).collect();
    if others.iter().any(|(c, _)| upstream.contains(c)) {
        return Ok(None);
    }
    let roles = g.roles.outlets();
    let p_temps: Vec<usize> = p.output_temps().collect();
    let mut inputs = pn.inputs.clone();
    let mut program: Vec<Instr> = p.program.clone();
    let base = program.len();
    let remap = |o: Operand, inputs: &mut Vec<Outlet>| match o {
        Operand::Temp(t) => Operand::Temp(t + base),
        Operand::Input(k) => {
            let src = rn.inputs[k];
            if src.node == producer {
                Operand::Temp(p_temps[src.output])
            } else if let Some(at) = inputs.iter().position(|i| *i == src) {
                Operand::Input(at)
            } else {
                inputs.push(src);
                Operand::Input(inputs.len() - 1)
            }
        }
    };
    for ins in &r.program {
        let a = remap(ins.args[0], &mut inputs);
        let b = if ins.op.arity() == 2 { remap(ins.args[1], &mut inputs) } else { ins.args[1] };
        program.push(Instr { op: ins.op, args: [a, b] });
    }
    let mut side_outputs: Vec<usize> = r.side_outputs.iter().map(|t| t + base).collect();
    let mut producer_outputs = Vec::new();
    for (j, &t) in p_temps.iter().enumerate() {
        let outlet = Outlet::new(producer, j);
        if others.iter().any(|(_, out)| *out == j) || roles.contains(&outlet) {
            side_outputs.push(t);
            producer_outputs.push((j, side_outputs.len()));
        }
    }
    let mut singles = 0;
    for i in &inputs {
        singles += usize::from(is_single(g.fact(*i)?));
    }
    if 1 + side_outputs.len() > MAX_OUTPUTS || singles > MAX_SINGLE_INPUTS || inputs.len() - singles > MAX_FULL_INPUTS {
        return Ok(None);
    }
    let op = FusedElementwise { program, inputs: inputs.len(), side_outputs };
    Ok(Some(Merge { op, inputs, producer_outputs }))
}

fn apply(g: &mut Graph, producer: NodeId, reader: NodeId, merge: Merge) -> Result<()> {
    // Named after the reader (a merged node's name once, however many merges it took),
    // once the reader's name is free.
    let rn = &g.node(reader).name;
    let name = format!("{}/merged", rn.strip_suffix("/merged").unwrap_or(rn));
    let reader_outputs = g.node(reader).outputs.len();
    let placement = g.node(reader).placement;
    let merged = g.add_node(g.unique_name(&name), merge.op.into(), merge.inputs)?;
    g.set_placement(merged, placement);
    for i in 0..reader_outputs {
        g.replace_uses(Outlet::new(reader, i), Outlet::new(merged, i))?;
    }
    g.remove_node(reader)?;
    for (j, out) in merge.producer_outputs {
        g.replace_uses(Outlet::new(producer, j), Outlet::new(merged, out))?;
    }
    g.remove_node(producer)?;
    if !g.contains_name(&name) {
        g.rename(merged, name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Initializer, Shape, passes::FuseElementwise};

    fn fused_nodes(g: &Graph) -> Vec<String> {
        g.nodes()
            .filter_map(|(_, n)| match &n.op {
                Op::FusedElementwise(f) => Some(format!("{f} <- {}", n.inputs.len())),
                _ => None,
            })
            .collect()
    }

    /// Momentum: `a' = 0.9 a + g` is assigned and read by `v' = v - 0.1 a'`. The two
    /// trees become one pass with `v'` as output 0 and `a'` as output 1, and the assign
    /// reads output 1.
    #[test]
    fn an_accumulator_read_by_the_update_leaves_the_same_pass() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let v = b.variable("v", &[4, 3], Initializer::Ones, true)?;
        let a = b.variable("a", &[4, 3], Initializer::Zeros, true)?;
        let grad = b.placeholder("g", DType::F32, Shape::known(&[4, 3]))?;
        let (m, lr) = (b.scalar(0.9)?, b.scalar(0.1)?);
        let decayed = b.mul(m, a)?;
        let acc = b.add(decayed, grad)?;
        let step = b.mul(lr, acc)?;
        let new_v = b.sub(v, step)?;
        let assign_a = b.assign(a, acc)?;
        let assign_v = b.assign(v, new_v)?;
        g.roles.fetches.insert("a".into(), assign_a);
        g.roles.fetches.insert("v".into(), assign_v);
        assert!(FuseElementwise.run(&mut g)?);
        assert_eq!(fused_nodes(&g).len(), 2);
        assert!(MergeElementwise.run(&mut g)?);
        g.check()?;
        assert_eq!(
            fused_nodes(&g),
            ["t0 = Mul(in0, in1); t1 = Add(t0, in2); t2 = Mul(in3, t1); t3 = Sub(in4, t2); also t1 <- 5"]
        );
        let (merged, _) = g.nodes().find(|(_, n)| matches!(n.op, Op::FusedElementwise(_))).expect("merged");
        assert_eq!(g.node(assign_a.node).inputs[1], Outlet::new(merged, 1));
        assert_eq!(g.node(assign_v.node).inputs[1], Outlet::new(merged, 0));
        Ok(())
    }

    /// Adam: both moments are assigned and read by the update. Two merges make one pass
    /// with three outputs, named once after the update, each assign reading its own.
    #[test]
    fn adam_moments_and_update_become_one_pass() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let v = b.variable("v", &[4, 3], Initializer::Ones, true)?;
        let m = b.variable("m", &[4, 3], Initializer::Zeros, true)?;
        let s = b.variable("s", &[4, 3], Initializer::Zeros, true)?;
        let grad = b.placeholder("g", DType::F32, Shape::known(&[4, 3]))?;
        let [b1, c1, b2, c2, lr, eps] = [0.9, 0.1, 0.999, 0.001, 0.01, 1e-7].map(|c| b.scalar(c));
        let (m_old, m_new) = (b.mul(b1?, m)?, b.mul(c1?, grad)?);
        let m2 = b.add(m_old, m_new)?;
        let (s_old, g2) = (b.mul(b2?, s)?, b.square(grad)?);
        let s_new = b.mul(c2?, g2)?;
        let s2 = b.add(s_old, s_new)?;
        let root = b.sqrt(s2)?;
        let denom = b.add(root, eps?)?;
        let ratio = b.div(m2, denom)?;
        let step = b.mul(lr?, ratio)?;
        let v2 = b.sub(v, step)?;
        for (var, value, key) in [(m, m2, "m"), (s, s2, "s"), (v, v2, "v")] {
            let a = b.assign(var, value)?;
            g.roles.fetches.insert(key.into(), a);
            b = GraphBuilder::new(&mut g);
        }
        FuseElementwise.run(&mut g)?;
        assert_eq!(fused_nodes(&g).len(), 3);
        assert!(MergeElementwise.run(&mut g)?);
        g.check()?;
        let merged: Vec<(NodeId, &crate::Node)> =
            g.nodes().filter(|(_, n)| matches!(n.op, Op::FusedElementwise(_))).collect();
        assert_eq!(merged.len(), 1, "{:?}", fused_nodes(&g));
        let (id, node) = merged[0];
        assert_eq!(node.outputs.len(), 3);
        assert!(node.name.ends_with("Sub/fused/merged"), "{}", node.name);
        let read: Vec<Outlet> = ["m", "s", "v"].iter().map(|k| g.node(g.roles.fetches[*k].node).inputs[1]).collect();
        assert!(read.iter().all(|o| o.node == id), "{read:?}");
        assert_eq!(read[2].output, 0, "the update is output 0");
        assert_ne!(read[0].output, read[1].output);
        Ok(())
    }

    /// A producer whose other reader is upstream of the reader stays apart: merged, the
    /// other reader would read the merged node's side output and feed it.
    #[test]
    fn a_merge_that_would_make_a_cycle_is_left_alone() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::known(&[2, 2]))?;
        let y = b.placeholder("y", DType::F32, Shape::known(&[2, 2]))?;
        let two = b.scalar(2.0)?;
        let scaled = b.mul(two, x)?;
        let p = b.add(scaled, y)?;
        // Not elementwise: a reader of `p` that the second tree reads.
        let side = b.transpose(p, &[1, 0])?;
        let q = b.mul(p, side)?;
        let r = b.sub(q, y)?;
        g.roles.fetches.insert("r".into(), r);
        FuseElementwise.run(&mut g)?;
        let before = fused_nodes(&g);
        assert_eq!(before.len(), 2, "{before:?}");
        assert!(!MergeElementwise.run(&mut g)?);
        assert_eq!(fused_nodes(&g), before);
        Ok(())
    }
}
