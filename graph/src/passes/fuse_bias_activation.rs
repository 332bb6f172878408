//! Conv2D / MatMul, then a bias add, then optionally ReLU, become one fused op.

use super::Pass;
use crate::{
    Graph, NodeId, Op, Outlet, Result,
    ops::{FusedActivation, FusedConv2d, FusedMatMul},
};

/// TensorFlow's remapper fusion. Runs after autodiff: the backward pass reads the ReLU's
/// output (ReluGrad) but never the convolution's or the bias add's, so those
/// intermediates can disappear. A link is fused only when its value has no other
/// consumer and no role names it.
#[derive(Debug, Default)]
pub struct FuseBiasActivation;

impl Pass for FuseBiasActivation {
    fn name(&self) -> &str {
        "fuse-bias-activation"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if !g.contains(id) || !matches!(g.node(id).op, Op::Add(_)) {
                continue;
            }
            let Some((producer, bias)) = bias_add_of(g, id) else { continue };
            let relu = sole_consumer(g, Outlet::from(id)).filter(|&r| matches!(g.node(r).op, Op::Relu(_)));
            let activation = if relu.is_some() { FusedActivation::Relu } else { FusedActivation::Linear };
            let last = relu.unwrap_or(id);
            let p = g.node(producer).clone();
            let op: Op = match &p.op {
                Op::Conv2d(c) if c.is_plain() => {
                    FusedConv2d { strides: c.strides, padding: c.padding, activation, residual: false }.into()
                }
                Op::MatMul(m) => {
                    FusedMatMul { transpose_a: m.transpose_a, transpose_b: m.transpose_b, activation }.into()
                }
                _ => continue,
            };
            let name = g.unique_name(&format!("{}/fused", p.name));
            let fused = g.add_node(name, op, vec![p.inputs[0], p.inputs[1], bias])?;
            g.set_placement(fused, p.placement);
            g.replace_uses(Outlet::from(last), Outlet::from(fused))?;
            if let Some(r) = relu {
                g.remove_node(r)?;
            }
            g.remove_node(id)?;
            g.remove_node(producer)?;
            changed = true;
        }
        Ok(changed)
    }
}

/// For `Add(y, bias)` (either order) where `y` is a Conv2D or MatMul output read only by
/// this add and `bias` is a vector over `y`'s last axis: `(producer of y, bias)`.
fn bias_add_of(g: &Graph, add: NodeId) -> Option<(NodeId, Outlet)> {
    let inputs = &g.node(add).inputs;
    for (main, bias) in [(inputs[0], inputs[1]), (inputs[1], inputs[0])] {
        let producer = g.node(main.node);
        // Batched products (attention's) keep their bias add: the fused kernel takes matrices.
        let matrix = || g.fact(main).is_ok_and(|f| f.rank() == 2);
        let fusable = (matches!(&producer.op, Op::Conv2d(c) if c.is_plain())
            || (matches!(producer.op, Op::MatMul(_)) && matrix()))
            && main.output == 0;
        if !fusable || sole_consumer(g, main) != Some(add) {
            continue;
        }
        let (out, b) = (g.fact(main).ok()?, g.fact(bias).ok()?);
        if b.rank() == 1 && out.shape.dims().last() == b.shape.dims().first() && g.fact(Outlet::from(add)).ok()? == out
        {
            return Some((main.node, bias));
        }
    }
    None
}

/// The only consumer of an outlet, if it has exactly one and no role names it.
pub(super) fn sole_consumer(g: &Graph, o: Outlet) -> Option<NodeId> {
    if g.roles.outlets().contains(&o) {
        return None;
    }
    match g.outlet_consumers(o).as_slice() {
        [(c, _)] => Some(*c),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Initializer, Shape, ops::Padding};

    #[test]
    fn fuses_conv_bias_relu_and_keeps_shared_values() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[5, 5, 1]))?;
        let w = b.variable("w", &[3, 3, 1, 4], Initializer::Ones, true)?;
        let bias = b.variable("b", &[4], Initializer::Zeros, true)?;
        let c = b.conv2d(x, w, [1, 1], Padding::Valid)?;
        let a = b.add(c, bias)?;
        let r = b.relu(a)?;
        // A second graph output reads the matmul directly: that one must not fuse.
        let f = b.flatten(r)?;
        let w2 = b.variable("w2", &[36, 2], Initializer::Ones, true)?;
        let b2 = b.variable("b2", &[2], Initializer::Zeros, true)?;
        let m = b.matmul(f, w2)?;
        let y = b.add(m, b2)?;
        g.roles.loss = Some(y);
        g.roles.fetches.insert("raw".into(), m);
        assert!(FuseBiasActivation.run(&mut g)?);
        g.check()?;
        let ops: Vec<&str> = g.nodes().map(|(_, n)| n.op.name()).collect();
        assert!(ops.contains(&"_FusedConv2D"));
        assert!(!ops.contains(&"Conv2D") && !ops.contains(&"Relu"));
        assert!(ops.contains(&"MatMul") && !ops.contains(&"_FusedMatMul"), "{ops:?}");
        Ok(())
    }
}
