//! `ReluGrad(y, Conv2dBackpropInput(w, dy) [+ other])` becomes one
//! `_FusedConv2DBackpropInput`.

use super::{Pass, fuse_bias_activation::sole_consumer};
use crate::{
    Graph, NodeId, Op, Outlet, Result,
    ops::{Conv2dBackpropInput, FusedConv2dBackpropInput},
};

/// Backward through `relu → conv`, the convolution's input gradient is read once, by the
/// ReLU's gradient (after a sum with the skip connection's gradient where the ReLU's
/// output also feeds a residual add). Fused, the kernel masks each image's gradient while
/// it is still in cache, instead of writing the gradient out and reading it back (with
/// the ReLU's output and the addend) in a pass of its own.
///
/// Runs before `FuseElementwise`, which would otherwise take the sum and the mask; only
/// plain convolutions (no dilation, one group) are taken, whose kernels run natively, and
/// only a sum of two values of the gradient's own shape (no broadcasting, no reordering of
/// a longer sum), everything on one device.
#[derive(Debug, Default)]
pub struct FuseReluGradIntoInputGrad;

impl Pass for FuseReluGradIntoInputGrad {
    fn name(&self) -> &str {
        "fuse-relu-grad-into-input-grad"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if g.contains(id) && matches!(g.node(id).op, Op::ReluGrad(_)) && fuse(g, id)? {
                changed = true;
            }
        }
        Ok(changed)
    }
}

fn fuse(g: &mut Graph, relu_grad: NodeId) -> Result<bool> {
    let node = g.node(relu_grad).clone();
    let (y, grad) = (node.inputs[0], node.inputs[1]);
    if sole_consumer(g, grad) != Some(relu_grad) || g.node(grad.node).placement != node.placement {
        return Ok(false);
    }
    // The input gradient itself, or a two-term sum of it and an addend.
    let (conv, addend, sum) = if input_grad(g, grad).is_some() {
        (grad, None, None)
    } else {
        match sum_of_input_grad(g, grad)? {
            Some((conv, addend)) => (conv, Some(addend), Some(grad.node)),
            None => return Ok(false),
        }
    };
    let Some(c) = input_grad(g, conv) else { return Ok(false) };
    let conv_node = g.node(conv.node).clone();
    if g.fact(y)? != g.fact(conv)? || conv_node.placement != node.placement {
        return Ok(false);
    }
    let op = FusedConv2dBackpropInput { input_grad: c, addend: addend.is_some() };
    let name = g.unique_name(&format!("{}/relu_grad", conv_node.name));
    let mut inputs = conv_node.inputs.clone();
    inputs.push(y);
    inputs.extend(addend);
    let fused = g.add_node(name, op.into(), inputs)?;
    g.set_placement(fused, node.placement);
    g.replace_uses(Outlet::from(relu_grad), Outlet::from(fused))?;
    g.remove_node(relu_grad)?;
    if let Some(s) = sum {
        g.remove_node(s)?;
    }
    g.remove_node(conv.node)?;
    Ok(true)
}

/// The plain `Conv2dBackpropInput` whose first output `o` is.
fn input_grad(g: &Graph, o: Outlet) -> Option<Conv2dBackpropInput> {
    match &g.node(o.node).op {
        Op::Conv2dBackpropInput(c) if o.output == 0 && c.conv().is_plain() => Some(c.clone()),
        _ => None,
    }
}

/// For a sum `s = a + b` (`Add` or a two-term `AddN`) of one shape and type: the input
/// gradient among its terms that only the sum reads, and the other term.
fn sum_of_input_grad(g: &Graph, s: Outlet) -> Result<Option<(Outlet, Outlet)>> {
    let node = g.node(s.node);
    if !matches!(node.op, Op::Add(_) | Op::AddN(_)) || node.inputs.len() != 2 || s.output != 0 {
        return Ok(None);
    }
    let out = g.fact(s)?;
    let (a, b) = (node.inputs[0], node.inputs[1]);
    for (conv, other) in [(a, b), (b, a)] {
        if conv != other
            && input_grad(g, conv).is_some()
            && sole_consumer(g, conv) == Some(s.node)
            && g.fact(conv)? == out
            && g.fact(other)? == out
        {
            return Ok(Some((conv, other)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Initializer, Shape, autodiff::gradients, ops::Padding, passes::FuseElementwise};

    /// `relu(conv(x, w1))` into a second convolution, with the ReLU's output added back
    /// after it (`skip`), differentiated with respect to `w1`.
    fn backward(g: &mut Graph, skip: bool) -> Result<()> {
        let mut b = GraphBuilder::new(g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[6, 6, 3]))?;
        let w1 = b.variable("w1", &[3, 3, 3, 4], Initializer::Ones, true)?;
        let w2 = b.variable("w2", &[3, 3, 4, 4], Initializer::Ones, true)?;
        let r = b.conv2d(x, w1, [1, 1], Padding::Same)?;
        let r = b.relu(r)?;
        let c = b.conv2d(r, w2, [1, 1], Padding::Same)?;
        let y = if skip { b.add(r, c)? } else { c };
        let loss = b.reduce_sum(y, &[0, 1, 2, 3], false)?;
        g.roles.loss = Some(loss);
        let grads = gradients(g, loss, &[w1])?;
        let gw = grads[0].expect("a gradient for w1");
        g.roles.fetches.insert("gw".into(), gw);
        Ok(())
    }

    /// The fused node's `addend` and input count, if there is one.
    fn fused_form(g: &Graph) -> Option<(bool, usize)> {
        g.nodes().find_map(|(_, n)| match &n.op {
            Op::FusedConv2dBackpropInput(f) => Some((f.addend, n.inputs.len())),
            _ => None,
        })
    }

    fn count(g: &Graph, name: &str) -> usize {
        g.nodes().filter(|(_, n)| n.op.name() == name).count()
    }

    #[test]
    fn the_relu_gradient_joins_the_input_gradient() -> Result<()> {
        let mut g = Graph::new();
        backward(&mut g, false)?;
        assert_eq!(count(&g, "ReluGrad"), 1);
        assert!(FuseReluGradIntoInputGrad.run(&mut g)?);
        g.check()?;
        assert_eq!((count(&g, "ReluGrad"), count(&g, "Conv2DBackpropInput")), (0, 0));
        let fused = fused_form(&g);
        assert_eq!(fused, Some((false, 3)));
        Ok(())
    }

    #[test]
    fn a_skip_connections_sum_joins_too() -> Result<()> {
        let mut g = Graph::new();
        backward(&mut g, true)?;
        assert!(FuseReluGradIntoInputGrad.run(&mut g)?);
        g.check()?;
        assert_eq!(count(&g, "ReluGrad"), 0);
        let fused = fused_form(&g);
        assert_eq!(fused, Some((true, 4)));
        Ok(())
    }

    #[test]
    fn an_input_gradient_read_elsewhere_stays_apart() -> Result<()> {
        let mut g = Graph::new();
        backward(&mut g, false)?;
        let conv = g.nodes().find(|(_, n)| n.op.name() == "Conv2DBackpropInput").map(|(id, _)| id);
        let conv = conv.expect("an input gradient");
        g.roles.fetches.insert("dx".into(), Outlet::from(conv));
        assert!(!FuseReluGradIntoInputGrad.run(&mut g)?);
        FuseElementwise.run(&mut g)?;
        g.check()?;
        assert_eq!(count(&g, "_FusedConv2DBackpropInput"), 0);
        Ok(())
    }
}
