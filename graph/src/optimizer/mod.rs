//! Optimizers lowered to graph nodes.
//!
//! The update of every variable is ordinary arithmetic on the graph, ending in an `Assign`,
//! and optimizer state (slots) is made of variables. So a checkpoint holds slots like any
//! variable, a strategy sees the updates it must place, and `engine plan` shows them.

mod adagrad;
mod adam;
mod clip;
mod config;
mod learning_rate;
mod momentum;
mod pass;
mod rmsprop;

pub use config::{LEARNING_RATE_SCALE, LearningRate, Optimizer, OptimizerConfig};
pub use pass::ApplyOptimizer;

use crate::{
    DType, GraphBuilder, Initializer, Op, Outlet, Result,
    ops::{Partition, Variable},
};

/// A zero-initialized, non-trainable variable named `<variable>/<slot>`, shaped like it.
pub(crate) fn slot(b: &mut GraphBuilder<'_>, var: Outlet, slot: &str, init: Initializer) -> Result<Outlet> {
    let node = b.graph().node(var.node);
    let name = format!("{}/{slot}", node.name);
    let (shape, partition) = match &node.op {
        Op::Variable(v) => (v.shape.clone(), v.partition.clone()),
        _ => return Err(crate::GraphError::invalid("optimizer slot", format!("'{}' is not a variable", node.name))),
    };
    // A shard's slot is the same shard of the whole variable's slot.
    let partition = partition.map(|p| Partition { of: format!("{}/{slot}", p.of), ..p });
    let op = Variable { dtype: DType::F32, shape, init, trainable: false, partition };
    b.op_named(&name, op.into(), &[])
}

/// `a * x + c * y` with scalar constants `a` and `c` (the moving averages of every optimizer).
pub(crate) fn blend(b: &mut GraphBuilder<'_>, a: f32, x: Outlet, c: f32, y: Outlet) -> Result<Outlet> {
    let a = b.scalar(a)?;
    let c = b.scalar(c)?;
    let ax = b.mul(a, x)?;
    let cy = b.mul(c, y)?;
    b.add(ax, cy)
}
