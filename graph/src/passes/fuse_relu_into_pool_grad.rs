//! `ReluGrad(y, MaxPoolGrad(y, ...))` becomes a masked MaxPoolGrad.

use super::{Pass, fuse_bias_activation::sole_consumer};
use crate::{Graph, Op, Outlet, Result, ops::MaxPool2dGrad};

/// When max pooling reads a ReLU's output `y`, its gradient is non-zero only at the argmax
/// cells, so the ReLU's gradient mask needs checking only there: one pass over the
/// (large) pre-pool tensor instead of two.
#[derive(Debug, Default)]
pub struct FuseReluIntoPoolGrad;

impl Pass for FuseReluIntoPoolGrad {
    fn name(&self) -> &str {
        "fuse-relu-into-pool-grad"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if !g.contains(id) || !matches!(g.node(id).op, Op::ReluGrad(_)) {
                continue;
            }
            let relu_grad = g.node(id).clone();
            let (y, grad) = (relu_grad.inputs[0], relu_grad.inputs[1]);
            let pool_grad = g.node(grad.node).clone();
            let Op::MaxPool2dGrad(p) = &pool_grad.op else { continue };
            if p.relu_mask || pool_grad.inputs[0] != y || sole_consumer(g, grad) != Some(id) {
                continue;
            }
            let name = g.unique_name(&format!("{}/relu", pool_grad.name));
            let op = MaxPool2dGrad { window: p.window, relu_mask: true };
            let fused = g.add_node(name, op.into(), pool_grad.inputs.clone())?;
            g.set_placement(fused, pool_grad.placement);
            g.replace_uses(Outlet::from(id), Outlet::from(fused))?;
            g.remove_node(id)?;
            g.remove_node(grad.node)?;
            changed = true;
        }
        Ok(changed)
    }
}
