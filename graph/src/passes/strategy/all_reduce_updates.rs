//! The mean over the replicas of every non-optimizer update (batch normalization's moving
//! statistics), so each replica's copy of those variables stays equal.

use crate::{Graph, GraphBuilder, Result, ops::ReduceOp, passes::Pass};

/// Runs after autodiff and before the optimizer: each `roles.updates` value becomes
/// `sum over replicas of (value / replicas)`, the mean, as TensorFlow's `ON_READ` /
/// `MEAN` aggregation of `BatchNormalization`'s moving statistics under a distribution
/// strategy. A sum of scaled values rather than a `Mean` so that
/// [`AllReduceFusion`](super::AllReduceFusion) packs them into the gradients' buckets
/// (which reduce by sum): the statistics exist early in the step, so they ride in the
/// first bucket and cost no collective of their own.
pub struct AllReduceUpdates {
    pub replicas: usize,
}

impl Pass for AllReduceUpdates {
    fn name(&self) -> &str {
        "all-reduce-updates"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        if g.roles.updates.is_empty() {
            return Ok(false);
        }
        let updates = g.roles.updates.clone();
        let first_bucket = g.roles.gradients.len();
        let inv = 1.0 / self.replicas.max(1) as f32;
        let mut b = GraphBuilder::new(g);
        let mut reduced = Vec::with_capacity(updates.len());
        for (i, (var, value)) in updates.iter().enumerate() {
            let var_name = b.graph().node(*var).name.clone();
            let out = b.with_scope(&format!("allreduce/update_{var_name}"), |b| {
                let share = b.scalar(inv)?;
                let scaled = b.mul(*value, share)?;
                b.all_reduce(&[scaled], ReduceOp::Sum, first_bucket + i)
            })?;
            reduced.push((*var, out[0]));
        }
        g.roles.updates = reduced;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Initializer, Op, Shape};

    #[test]
    fn each_update_becomes_a_scaled_sum_over_replicas() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let moving = b.variable("moving_mean", &[3], Initializer::Zeros, false)?;
        let mean = b.reduce_mean(x, &[0], false)?;
        g.roles.updates.push((moving.node, mean));
        assert!(AllReduceUpdates { replicas: 4 }.run(&mut g)?);
        g.check()?;
        let (_, reduced) = g.roles.updates[0];
        assert!(matches!(g.node(reduced.node).op, Op::AllReduce(ref a) if a.reduce == ReduceOp::Sum && !a.immediate));
        let scaled = g.node(reduced.node).inputs[0];
        assert!(matches!(g.node(scaled.node).op, Op::Mul(_)));
        Ok(())
    }
}
