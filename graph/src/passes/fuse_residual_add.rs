//! `Relu(FusedConv2D(x, w, b) + skip)` becomes one `_FusedConv2D` with an addend.

use super::{Pass, fuse_bias_activation::sole_consumer};
use crate::{
    Graph, NodeId, Op, Outlet, Result,
    ops::{FusedActivation, FusedConv2d},
};

/// A residual block ends in `activation(conv(x) + bias + skip)`. Unfused, the sum and the
/// ReLU are a pass of their own over the block's largest tensor, read back from memory
/// after the convolution wrote it; fused, the convolution's kernel adds the skip and
/// applies the ReLU to each image's output while it is in cache (TensorFlow's remapper
/// does the same: `_FusedConv2D` with `fused_ops = [BiasAdd, Add, Relu]`).
///
/// Runs after `FuseBiasActivation` (it reads the linear `_FusedConv2D` that pass forms)
/// and before `FuseElementwise`, which would otherwise take the add and the ReLU. The
/// convolution's output must be read by the add alone, and the add's by the ReLU alone for
/// the ReLU to be taken in; the backward pass reads neither (a ReLU's gradient reads its
/// output, which the fused op produces).
#[derive(Debug, Default)]
pub struct FuseResidualAdd;

impl Pass for FuseResidualAdd {
    fn name(&self) -> &str {
        "fuse-residual-add"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if g.contains(id) && matches!(g.node(id).op, Op::Add(_)) && fuse(g, id)? {
                changed = true;
            }
        }
        Ok(changed)
    }
}

fn fuse(g: &mut Graph, add: NodeId) -> Result<bool> {
    let Some((conv_id, skip)) = conv_and_skip(g, add)? else { return Ok(false) };
    let conv = g.node(conv_id).clone();
    let Op::FusedConv2d(c) = &conv.op else { return Ok(false) };
    let relu = sole_consumer(g, Outlet::from(add))
        .filter(|&r| matches!(g.node(r).op, Op::Relu(_)) && g.node(r).placement == conv.placement);
    let op = FusedConv2d {
        strides: c.strides,
        padding: c.padding,
        activation: if relu.is_some() { FusedActivation::Relu } else { FusedActivation::Linear },
        residual: true,
    };
    let last = relu.unwrap_or(add);
    let name = g.unique_name(&format!("{}/residual", conv.name));
    let mut inputs = conv.inputs.clone();
    inputs.push(skip);
    let fused = g.add_node(name, op.into(), inputs)?;
    g.set_placement(fused, conv.placement);
    g.replace_uses(Outlet::from(last), Outlet::from(fused))?;
    if let Some(r) = relu {
        g.remove_node(r)?;
    }
    g.remove_node(add)?;
    g.remove_node(conv_id)?;
    Ok(true)
}

/// For `Add(a, b)`: the linear, addend-free `_FusedConv2D` among its inputs whose output
/// only this add reads, and the other input, when that has the add's own shape and type
/// (no broadcasting) and everything runs on one device.
fn conv_and_skip(g: &Graph, add: NodeId) -> Result<Option<(NodeId, Outlet)>> {
    let node = g.node(add);
    let out = g.fact(Outlet::from(add))?;
    for (main, skip) in [(node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])] {
        let conv = g.node(main.node);
        let plain = matches!(&conv.op, Op::FusedConv2d(c) if c.activation == FusedActivation::Linear && !c.residual);
        if !plain
            || main.output != 0
            || main == skip
            || sole_consumer(g, main) != Some(add)
            || conv.placement != node.placement
        {
            continue;
        }
        if g.fact(skip)? == out && g.fact(main)? == out {
            return Ok(Some((main.node, skip)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        DType, GraphBuilder, Initializer, Shape,
        ops::Padding,
        passes::{FuseBiasActivation, FuseElementwise},
    };

    fn block(g: &mut Graph, relu: bool) -> Result<Outlet> {
        let mut b = GraphBuilder::new(g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[6, 6, 4]))?;
        let w = b.variable("w", &[3, 3, 4, 4], Initializer::Ones, true)?;
        let bias = b.variable("b", &[4], Initializer::Zeros, true)?;
        let c = b.conv2d(x, w, [1, 1], Padding::Same)?;
        let a = b.add(c, bias)?;
        let sum = b.add(x, a)?;
        Ok(if relu { b.relu(sum)? } else { sum })
    }

    fn ops(g: &Graph) -> Vec<&'static str> {
        g.nodes().map(|(_, n)| n.op.name()).collect()
    }

    #[test]
    fn the_skip_and_the_relu_join_the_convolution() -> Result<()> {
        let mut g = Graph::new();
        let y = block(&mut g, true)?;
        g.roles.loss = Some(y);
        FuseBiasActivation.run(&mut g)?;
        assert!(FuseResidualAdd.run(&mut g)?);
        g.check()?;
        let ops = ops(&g);
        assert!(!ops.contains(&"Add") && !ops.contains(&"Relu"), "{ops:?}");
        let fused = g.nodes().find(|(_, n)| matches!(&n.op, Op::FusedConv2d(c) if c.residual)).map(|(id, _)| id);
        let fused = fused.expect("a residual _FusedConv2D");
        assert_eq!(g.roles.loss, Some(Outlet::from(fused)));
        let Op::FusedConv2d(c) = &g.node(fused).op else { unreachable!() };
        assert_eq!(c.activation, FusedActivation::Relu);
        assert_eq!(g.node(fused).inputs.len(), 4);
        Ok(())
    }

    #[test]
    fn a_sum_read_elsewhere_keeps_its_relu_apart() -> Result<()> {
        let mut g = Graph::new();
        let y = block(&mut g, true)?;
        let sum = g.node(y.node).inputs[0];
        g.roles.loss = Some(y);
        g.roles.fetches.insert("sum".into(), sum);
        FuseBiasActivation.run(&mut g)?;
        // The add's value is a role's: it must stay, and so must the ReLU that reads it.
        assert!(!FuseResidualAdd.run(&mut g)? || ops(&g).contains(&"Relu"));
        FuseElementwise.run(&mut g)?;
        g.check()?;
        Ok(())
    }

    #[test]
    fn a_linear_sum_fuses_without_a_relu() -> Result<()> {
        let mut g = Graph::new();
        let y = block(&mut g, false)?;
        g.roles.loss = Some(y);
        FuseBiasActivation.run(&mut g)?;
        assert!(FuseResidualAdd.run(&mut g)?);
        g.check()?;
        let fused = g.nodes().find(
            |(_, n)| matches!(&n.op, Op::FusedConv2d(c) if c.residual && c.activation == FusedActivation::Linear),
        );
        assert!(fused.is_some(), "{:?}", ops(&g));
        Ok(())
    }
}
