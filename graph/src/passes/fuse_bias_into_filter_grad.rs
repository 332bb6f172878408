//! A bias gradient `Sum(dy, [0, 1, 2])` beside `Conv2DBackpropFilter(x, dy)` joins it.

use super::Pass;
use crate::{Graph, Op, Outlet, Result, ops::Conv2dBackpropFilter};

/// Both read the whole output gradient, which for an early convolution is the largest
/// tensor of the step; fused, it is read once.
#[derive(Debug, Default)]
pub struct FuseBiasIntoFilterGrad;

impl Pass for FuseBiasIntoFilterGrad {
    fn name(&self) -> &str {
        "fuse-bias-into-filter-grad"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if !g.contains(id) {
                continue;
            }
            let node = g.node(id).clone();
            let Op::Conv2dBackpropFilter(f) = &node.op else { continue };
            if f.with_bias {
                continue;
            }
            let dy = node.inputs[1];
            let sum = g
                .outlet_consumers(dy)
                .into_iter()
                .map(|(c, _)| c)
                .find(|&c| matches!(&g.node(c).op, Op::ReduceSum(r) if r.axes == [0, 1, 2] && !r.keep_dims));
            let Some(sum) = sum else { continue };
            let name = g.unique_name(&format!("{}/with_bias", node.name));
            let op = Conv2dBackpropFilter { with_bias: true, ..f.clone() };
            let fused = g.add_node(name, op.into(), node.inputs.clone())?;
            g.set_placement(fused, node.placement);
            g.replace_uses(Outlet::from(id), Outlet::new(fused, 0))?;
            g.replace_uses(Outlet::from(sum), Outlet::new(fused, 1))?;
            g.remove_node(id)?;
            g.remove_node(sum)?;
            changed = true;
        }
        Ok(changed)
    }
}
