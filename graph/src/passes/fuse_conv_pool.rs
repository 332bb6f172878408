//! A convolution block `MaxPool(activation(Conv2D(x) + bias))` becomes one op, and its
//! backward `Conv2DBackpropFilter(x, MaxPoolGrad(y, ...))` another.

use super::{Pass, fuse_bias_activation::sole_consumer};
use crate::{
    Graph, NodeId, Op, Outlet, Result,
    ops::{
        FusedActivation, FusedConv2dMaxPool, FusedMaxPoolConv2dBackpropFilter, MaxPoolGradWithArgmax,
        nn::padding::spatial,
    },
};

/// Runs after the other fusions (it reads `_FusedConv2D`, the ReLU-masked `MaxPoolGrad` and
/// the bias-carrying `Conv2DBackpropFilter` they form). The convolution's output `y` is the
/// largest tensor of a CNN block (four times the pooled one for a 2x2 pool):
/// - forward, `FusedConv2dMaxPool` pools each image's output while it is in cache, so `y`
///   is never stored;
/// - backward, `MaxPoolGrad(y, argmax, g)` needs `y` only for its shape and, after a ReLU,
///   for the mask `y > 0` at the argmax cell, which is the pooled value's sign: it becomes
///   `MaxPoolGradWithArgmax(pooled, argmax, g)`;
/// - when that gradient only feeds the filter gradient (a first layer: no input gradient),
///   the two become `FusedMaxPoolConv2dBackpropFilter`, and the convolution-sized gradient
///   is never stored either.
///
/// The rewrite applies when `y` has no reader but the pool and its gradients, so nothing
/// else needs the tensor that is no longer produced.
#[derive(Debug, Default)]
pub struct FuseConvPool;

impl Pass for FuseConvPool {
    fn name(&self) -> &str {
        "fuse-conv-pool"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if g.contains(id) && matches!(g.node(id).op, Op::MaxPool2d(_)) && fuse_block(g, id)? {
                changed = true;
            }
        }
        for id in g.topological_order()? {
            if g.contains(id) && matches!(g.node(id).op, Op::Conv2dBackpropFilter(_)) && fuse_filter_grad(g, id)? {
                changed = true;
            }
        }
        Ok(changed)
    }
}

/// `MaxPool(FusedConv2D(...))` and the pool's gradients, when nothing else reads `y`.
fn fuse_block(g: &mut Graph, pool_id: NodeId) -> Result<bool> {
    let pool = g.node(pool_id).clone();
    let Op::MaxPool2d(p) = &pool.op else { return Ok(false) };
    let y = pool.inputs[0];
    let conv = g.node(y.node).clone();
    let Op::FusedConv2d(c) = &conv.op else { return Ok(false) };
    if g.roles.outlets().contains(&y) || conv.placement != pool.placement {
        return Ok(false);
    }
    let relu = c.activation == FusedActivation::Relu;
    let mut grads = Vec::new();
    for (consumer, input) in g.outlet_consumers(y) {
        if consumer == pool_id {
            continue;
        }
        // A pool gradient that reads `y` as its first input, with this pool's argmax, and
        // masks exactly when the activation is a ReLU (otherwise an unfused ReluGrad also
        // reads `y`).
        let node = g.node(consumer);
        match &node.op {
            Op::MaxPool2dGrad(grad)
                if input == 0
                    && grad.window == p.window
                    && grad.relu_mask == relu
                    && node.inputs[1] == Outlet::new(pool_id, 1) =>
            {
                grads.push(consumer)
            }
            _ => return Ok(false),
        }
    }
    let conv_hw = spatial(g.fact(y)?, "convolution output").map_err(|e| crate::GraphError::invalid(&conv.name, e))?;
    let name = g.unique_name(&format!("{}/pool", conv.name));
    let op = FusedConv2dMaxPool {
        strides: c.strides,
        padding: c.padding,
        activation: c.activation,
        pool: p.window,
        residual: c.residual,
    };
    let fused = g.add_node(name, op.into(), conv.inputs.clone())?;
    g.set_placement(fused, conv.placement);
    let (pooled, argmax) = (Outlet::new(fused, 0), Outlet::new(fused, 1));
    for grad_id in grads {
        let grad = g.node(grad_id).clone();
        let op = MaxPoolGradWithArgmax { window: p.window, input_hw: conv_hw, relu_mask: relu };
        let name = g.unique_name(&format!("{}/with_argmax", grad.name));
        let unpooled = g.add_node(name, op.into(), vec![pooled, argmax, grad.inputs[2]])?;
        g.set_placement(unpooled, grad.placement);
        g.replace_uses(Outlet::from(grad_id), Outlet::from(unpooled))?;
        g.remove_node(grad_id)?;
    }
    g.replace_uses(Outlet::new(pool_id, 0), pooled)?;
    g.replace_uses(Outlet::new(pool_id, 1), argmax)?;
    g.remove_node(pool_id)?;
    g.remove_node(y.node)?;
    Ok(true)
}

/// `Conv2DBackpropFilter(x, MaxPoolGradWithArgmax(pooled, argmax, g))` when the unpooled
/// gradient has no other reader.
fn fuse_filter_grad(g: &mut Graph, id: NodeId) -> Result<bool> {
    let node = g.node(id).clone();
    let Op::Conv2dBackpropFilter(f) = &node.op else { return Ok(false) };
    if !f.conv().is_plain() {
        return Ok(false);
    }
    let gy = node.inputs[1];
    let unpool = g.node(gy.node).clone();
    let Op::MaxPoolGradWithArgmax(u) = &unpool.op else { return Ok(false) };
    if sole_consumer(g, gy) != Some(id) || unpool.placement != node.placement {
        return Ok(false);
    }
    let op = FusedMaxPoolConv2dBackpropFilter {
        filter_hw: f.filter_hw,
        strides: f.strides,
        padding: f.padding,
        with_bias: f.with_bias,
        pool: u.window,
        conv_hw: u.input_hw,
        relu_mask: u.relu_mask,
    };
    let mut inputs = vec![node.inputs[0]];
    inputs.extend(unpool.inputs.iter().copied());
    let name = g.unique_name(&format!("{}/from_pool", node.name));
    let fused = g.add_node(name, op.into(), inputs)?;
    g.set_placement(fused, node.placement);
    for output in 0..node.outputs.len() {
        g.replace_uses(Outlet::new(id, output), Outlet::new(fused, output))?;
    }
    g.remove_node(id)?;
    g.remove_node(gy.node)?;
    Ok(true)
}
