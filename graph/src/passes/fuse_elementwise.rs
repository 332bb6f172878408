//! Trees of elementwise float ops become one `_FusedElementwise` node.

use super::{Pass, fuse_bias_activation::sole_consumer};
use crate::{
    DType, Fact, Graph, Node, NodeId, Op, Outlet, Result,
    ops::{ElementOp, FusedElementwise, Instr, Operand, is_single},
};

/// Runs after the other fusions, last before dead-code elimination. A tree is grown from
/// a root (an elementwise node whose result is read by something that is not fusable into
/// it) through inputs that are elementwise nodes read by nothing else, of the root's
/// shape, on the root's device. The tree's leaves become the fused node's inputs; each must
/// have the root's shape or be a single element, so the kernel needs no general
/// broadcasting. A tree of one op is left alone.
///
/// On the tutorial CNN this turns each SGD update `var - lr * g` into one pass over the
/// variable; Adam's nine ops per variable become three (the two moments and the update,
/// each also assigned). On a residual block, the skip's add and the ReLU after it become
/// one pass forward, and the two gradients' sum and the ReLU's gradient one backward.
#[derive(Debug, Default)]
pub struct FuseElementwise;

impl Pass for FuseElementwise {
    fn name(&self) -> &str {
        "fuse-elementwise"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        let order = g.topological_order()?;
        for &id in order.iter().rev() {
            if !g.contains(id) || element_op(g.node(id)).is_none() || absorbed_by_consumer(g, id)? {
                continue;
            }
            if fuse_tree(g, id)? {
                changed = true;
            }
        }
        Ok(changed)
    }
}

fn element_op(node: &Node) -> Option<ElementOp> {
    Some(match &node.op {
        Op::Add(_) => ElementOp::Add,
        // The sum of two gradients (a residual's fork, read back) is one add.
        Op::AddN(_) if node.inputs.len() == 2 => ElementOp::Add,
        Op::Sub(_) => ElementOp::Sub,
        Op::Mul(_) => ElementOp::Mul,
        Op::Div(_) => ElementOp::Div,
        Op::Maximum(_) => ElementOp::Maximum,
        Op::Minimum(_) => ElementOp::Minimum,
        Op::Neg(_) => ElementOp::Neg,
        Op::Exp(_) => ElementOp::Exp,
        Op::Log(_) => ElementOp::Log,
        Op::Sqrt(_) => ElementOp::Sqrt,
        Op::Square(_) => ElementOp::Square,
        Op::Relu(_) => ElementOp::Relu,
        Op::ReluGrad(_) => ElementOp::ReluGrad,
        _ => return None,
    })
}

/// Whether `id` would be an interior node of its consumer's tree (so it is not a root).
fn absorbed_by_consumer(g: &Graph, id: NodeId) -> Result<bool> {
    let out = Outlet::from(id);
    let Some(consumer) = sole_consumer(g, out) else { return Ok(false) };
    if element_op(g.node(consumer)).is_none() || g.node(consumer).placement != g.node(id).placement {
        return Ok(false);
    }
    Ok(g.fact(out)? == g.fact(Outlet::from(consumer))?)
}

/// What the tree rooted at one node reads and computes.
struct Tree {
    root_fact: Fact,
    placement: Option<crate::Placement>,
    inputs: Vec<Outlet>,
    program: Vec<Instr>,
    nodes: Vec<NodeId>,
}

impl Tree {
    /// Appends `id`'s instructions (its fusable inputs' first) and returns its operand;
    /// `None` if a leaf has a shape the kernel cannot read.
    fn grow(&mut self, g: &Graph, id: NodeId) -> Result<Option<Operand>> {
        let node = g.node(id);
        let Some(op) = element_op(node) else { return Ok(None) };
        let mut args = [Operand::Input(0); 2];
        for (slot, &input) in node.inputs.iter().enumerate().take(op.arity()) {
            let fusable = input.output == 0
                && element_op(g.node(input.node)).is_some()
                && sole_consumer(g, input) == Some(id)
                && g.node(input.node).placement == self.placement
                && *g.fact(input)? == self.root_fact;
            args[slot] = if fusable {
                match self.grow(g, input.node)? {
                    Some(a) => a,
                    None => return Ok(None),
                }
            } else {
                let input = unbroadcast(g, input)?;
                let fact = g.fact(input)?;
                if fact.dtype != self.root_fact.dtype || (*fact != self.root_fact && !is_single(fact)) {
                    return Ok(None);
                }
                let k = match self.inputs.iter().position(|i| *i == input) {
                    Some(k) => k,
                    None => {
                        self.inputs.push(input);
                        self.inputs.len() - 1
                    }
                };
                Operand::Input(k)
            };
        }
        self.program.push(Instr { op, args });
        self.nodes.push(id);
        Ok(Some(Operand::Temp(self.program.len() - 1)))
    }
}

/// The single element that `input` broadcasts, where it is a `BroadcastTo` of one (an L2
/// penalty's gradient, `BroadcastTo(c)` added to `2w`): the kernel repeats a single input
/// itself, where reading the broadcast value materialized it element by element first.
fn unbroadcast(g: &Graph, input: Outlet) -> Result<Outlet> {
    let node = g.node(input.node);
    if let (Op::BroadcastTo(_), Some(&source)) = (&node.op, node.inputs.first())
        && node.placement == g.node(source.node).placement
        && is_single(g.fact(source)?)
    {
        return Ok(source);
    }
    Ok(input)
}

fn fuse_tree(g: &mut Graph, root: NodeId) -> Result<bool> {
    let root_fact = g.fact(Outlet::from(root))?.clone();
    if root_fact.dtype != DType::F32 || is_single(&root_fact) {
        return Ok(false);
    }
    let mut tree = Tree {
        root_fact,
        placement: g.node(root).placement,
        inputs: Vec::new(),
        program: Vec::new(),
        nodes: Vec::new(),
    };
    if tree.grow(g, root)?.is_none()
        || tree.program.len() < 2
        || !tree.inputs.iter().any(|i| g.fact(*i).is_ok_and(|f| !is_single(f)))
    {
        return Ok(false);
    }
    let name = g.unique_name(&format!("{}/fused", g.node(root).name));
    let op = FusedElementwise::new(tree.program, tree.inputs.len());
    let fused = g.add_node(name, op.into(), tree.inputs)?;
    g.set_placement(fused, tree.placement);
    g.replace_uses(Outlet::from(root), Outlet::from(fused))?;
    // The root first, then each interior node once its only reader is gone.
    for id in tree.nodes.into_iter().rev() {
        g.remove_node(id)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GraphBuilder, Initializer, Shape};

    /// An Adam-like moment `m' = 0.9 m + 0.1 g` is fused (two full-size inputs, two
    /// scalars); a value read twice by one node (`s + s`) is not absorbed, which leaves two
    /// single ops; a single op stays; a broadcast bias add (neither full-size nor one
    /// element) stays, and so does its reader.
    #[test]
    fn fuses_trees_of_full_size_and_single_element_inputs() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let m = b.variable("m", &[4, 3], Initializer::Ones, true)?;
        let x = b.placeholder("g", DType::F32, Shape::known(&[4, 3]))?;
        let (c9, c1) = (b.scalar(0.9)?, b.scalar(0.1)?);
        let decayed = b.mul(c9, m)?;
        let fresh = b.mul(c1, x)?;
        let moment = b.add(decayed, fresh)?;
        let s = b.square(moment)?;
        let twice = b.add(s, s)?;
        let lone = b.neg(x)?;
        let bias = b.variable("bias", &[3], Initializer::Zeros, true)?;
        let row = b.placeholder("row", DType::F32, Shape::known(&[4, 3]))?;
        let biased = b.add(row, bias)?;
        let shifted = b.sub(biased, c1)?;
        g.roles.fetches.insert("moment".into(), moment);
        g.roles.fetches.insert("twice".into(), twice);
        g.roles.fetches.insert("lone".into(), lone);
        g.roles.fetches.insert("shifted".into(), shifted);
        assert!(FuseElementwise.run(&mut g)?);
        g.check()?;
        let fused: Vec<String> = g
            .nodes()
            .filter_map(|(_, n)| match &n.op {
                Op::FusedElementwise(f) => Some(format!("{} <- {}", f, n.inputs.len())),
                _ => None,
            })
            .collect();
        assert_eq!(fused, ["t0 = Mul(in0, in1); t1 = Mul(in2, in3); t2 = Add(t0, t1) <- 4"]);
        let ops: Vec<&str> = g.nodes().map(|(_, n)| n.op.name()).collect();
        assert!(ops.contains(&"Neg"), "a single op stays: {ops:?}");
        assert!(ops.contains(&"Square"), "{ops:?}");
        assert_eq!(ops.iter().filter(|o| **o == "Add").count(), 2, "s + s and the bias add stay: {ops:?}");
        assert!(ops.contains(&"Sub"), "the bias add's reader stays too: {ops:?}");
        Ok(())
    }

    /// An L2 penalty's gradient `BroadcastTo(reshape(c)) + 2 w` reads the one-element
    /// `reshape(c)`, not the broadcast; a broadcast of a full-size row stays an input.
    #[test]
    fn a_broadcast_single_element_is_read_as_a_single() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let w = b.variable("w", &[4, 3], Initializer::Ones, true)?;
        let c = b.scalar(0.5)?;
        let one = b.reshape(c, Shape::known(&[1, 1]))?;
        let spread = b.broadcast_to(one, Shape::known(&[4, 3]))?;
        let two = b.scalar(2.0)?;
        let twice = b.mul(two, w)?;
        let penalty = b.add(spread, twice)?;
        g.roles.fetches.insert("penalty".into(), penalty);
        assert!(FuseElementwise.run(&mut g)?);
        g.check()?;
        let (_, fused) = g.nodes().find(|(_, n)| matches!(n.op, Op::FusedElementwise(_))).expect("fused");
        assert_eq!(fused.inputs.len(), 3);
        assert!(fused.inputs.contains(&one), "reads the single element: {:?}", fused.inputs);
        assert!(!fused.inputs.contains(&spread));
        Ok(())
    }
}
