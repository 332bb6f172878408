//! Scales the training loss by `1 / replicas in sync` before differentiation.

use crate::{Graph, GraphBuilder, GraphError, Result, passes::Pass};

/// TensorFlow's `compute_average_loss`: each replica's loss is a mean over its own
/// per-replica batch, so scaled by `per-replica batch / global batch` (= `1 / replicas`,
/// the input pipeline giving every replica the same batch size in training) the replicas'
/// losses *sum* to the mean over the global batch, and so do their gradients: an
/// all-reduce with `ReduceOp::Sum` then yields exactly the single-device gradient of the
/// global batch. Runs before autodiff.
pub struct ScaleLoss {
    pub replicas: usize,
}

impl Pass for ScaleLoss {
    fn name(&self) -> &str {
        "scale-loss"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        if self.replicas <= 1 {
            return Ok(false);
        }
        let loss = g.roles.loss.ok_or_else(|| GraphError::invalid("training graph", "it has no loss"))?;
        let mut b = GraphBuilder::new(g);
        let scaled = b.with_scope("scale_loss", |b| {
            let factor = b.scalar(1.0 / self.replicas as f32)?;
            b.mul(loss, factor)
        })?;
        g.roles.loss = Some(scaled);
        Ok(true)
    }
}
