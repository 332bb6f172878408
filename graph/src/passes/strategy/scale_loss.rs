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
            // Divide by N rather than multiply by 1/N: N is exact in f32, 1/3 is not, and an
            // f64 run would otherwise inherit f32's rounding of the factor.
            let replicas = b.scalar(self.replicas as f32)?;
            b.div(loss, replicas)
        })?;
        g.roles.loss = Some(scaled);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Op, Shape};

    fn graph_with_loss() -> Result<Graph> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let loss = b.reduce_mean(x, &[], false)?;
        g.roles.loss = Some(loss);
        Ok(g)
    }

    #[test]
    fn the_loss_is_divided_by_the_replica_count_exactly() -> Result<()> {
        let mut g = graph_with_loss()?;
        let before = g.roles.loss;
        assert!(ScaleLoss { replicas: 3 }.run(&mut g)?);
        g.check()?;
        let scaled = g.roles.loss.ok_or_else(|| GraphError::invalid("test", "no loss"))?;
        assert_ne!(Some(scaled), before);
        let node = g.node(scaled.node);
        assert!(matches!(node.op, Op::Div(_)), "{:?}", node.op);
        assert_eq!(node.inputs[0], before.ok_or_else(|| GraphError::invalid("test", "no loss"))?);
        // The divisor is the count itself (exact in every dtype), not a rounded 1/3.
        match &g.node(node.inputs[1].node).op {
            Op::Constant(c) => assert_eq!(c.value.scalar_value(), Some(3.0)),
            other => panic!("divisor is {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn one_replica_leaves_the_loss_alone() -> Result<()> {
        let mut g = graph_with_loss()?;
        let before = g.roles.loss;
        assert!(!ScaleLoss { replicas: 1 }.run(&mut g)?);
        assert_eq!(g.roles.loss, before);
        Ok(())
    }
}
