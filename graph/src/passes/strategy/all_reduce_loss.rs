//! An all-reduce of the training loss, so that what a replica fetches as its loss is the
//! loss of the global batch (`mirrored`, `central_storage`, `multi_worker`).

use crate::{Graph, GraphBuilder, GraphError, Op, Result, ops::ReduceOp, passes::Pass};

/// Runs after autodiff: `roles.loss` then points at an `AllReduce` of the replica's loss,
/// which no gradient reads (the backward pass is already built from the local loss), so
/// training computes exactly what it did without it; only the fetched value changes.
///
/// With [`ScaleLoss`](super::ScaleLoss) before autodiff (each replica's loss divided by the
/// replicas in sync) and `ReduceOp::Sum`, every replica fetches the mean over the global
/// batch, in one process or across many. The one-element tensor costs no collective of its
/// own: [`AllReduceFusion`](super::AllReduceFusion) packs it into the last gradient bucket.
pub struct AllReduceLoss {
    pub reduce: ReduceOp,
}

impl Pass for AllReduceLoss {
    fn name(&self) -> &str {
        "all-reduce-loss"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        let loss = g.roles.loss.ok_or_else(|| GraphError::invalid("training graph", "it has no loss"))?;
        if matches!(g.node(loss.node).op, Op::AllReduce(_)) {
            return Ok(false);
        }
        // Before autodiff the all-reduce would be differentiated: refuse rather than
        // change the gradients.
        if g.roles.gradients.is_empty() {
            return Err(GraphError::invalid(
                "training graph",
                "all-reduce-loss runs after autodiff, and it has no gradients",
            ));
        }
        // Its launch position when left unfused: after every gradient's.
        let bucket = g.roles.gradients.len();
        let mut b = GraphBuilder::new(g);
        let reduced = b.with_scope("allreduce/loss", |b| b.all_reduce(&[loss], self.reduce, bucket))?;
        g.roles.loss = Some(reduced[0]);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Initializer, Outlet, Shape, autodiff::Autodiff, passes::strategy::AllReduceGradients};

    /// A linear model's mean loss, differentiated, its gradients all-reduced.
    fn differentiated() -> Result<(Graph, Outlet)> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let w = b.variable("w", &[3, 2], Initializer::Ones, true)?;
        let y = b.matmul(x, w)?;
        let loss = b.reduce_mean(y, &[], false)?;
        g.roles.loss = Some(loss);
        Autodiff.run(&mut g)?;
        AllReduceGradients { reduce: ReduceOp::Sum }.run(&mut g)?;
        Ok((g, loss))
    }

    #[test]
    fn the_fetched_loss_is_reduced_and_the_gradients_do_not_read_it() -> Result<()> {
        let (mut g, local) = differentiated()?;
        let gradients = g.roles.gradients.clone();
        assert!(AllReduceLoss { reduce: ReduceOp::Sum }.run(&mut g)?);
        g.check()?;
        let loss = g.roles.loss.ok_or_else(|| GraphError::invalid("test", "no loss"))?;
        let node = g.node(loss.node);
        assert!(
            matches!(node.op, Op::AllReduce(ref a) if a.reduce == ReduceOp::Sum && a.bucket == gradients.len()),
            "{:?}",
            node.op
        );
        assert_eq!(node.inputs, vec![local]);
        assert_eq!(g.fact(loss)?, g.fact(local)?);
        // Nothing reads the reduced loss, and the gradients are the ones autodiff built.
        assert!(g.consumers(loss.node).is_empty());
        assert_eq!(g.roles.gradients, gradients);
        // A second run changes nothing: the loss is reduced once.
        assert!(!AllReduceLoss { reduce: ReduceOp::Sum }.run(&mut g)?);
        Ok(())
    }

    #[test]
    fn before_autodiff_it_refuses() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let loss = b.reduce_mean(x, &[], false)?;
        g.roles.loss = Some(loss);
        let err = AllReduceLoss { reduce: ReduceOp::Sum }.run(&mut g).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("after autodiff"), "{err}");
        Ok(())
    }
}
