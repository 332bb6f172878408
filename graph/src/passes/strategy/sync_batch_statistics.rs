//! Batch statistics over the global batch (Keras' `SyncBatchNormalization`).

use crate::{Graph, GraphBuilder, Result, ops::ReduceOp, passes::Pass};

/// Runs before autodiff: every outlet of `roles.cross_replica_means` (a synchronized
/// layer's per-replica mean of `d = x - moving_mean` and of `d²`) is replaced, for all its readers, by its
/// mean over the replicas, an immediate all-reduce (launched where it stands, not
/// bucketed: the rest of the forward pass waits on it). With equal per-replica batches the
/// mean of the replicas' means is the global batch's mean, so the layer normalizes exactly
/// as one replica on the global batch would. Autodiff then differentiates through the
/// all-reduce (its gradient is the same mean of the output gradients), so the backward
/// pass matches too.
pub struct SyncBatchStatistics;

impl Pass for SyncBatchStatistics {
    fn name(&self) -> &str {
        "sync-batch-statistics"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        let wanted = std::mem::take(&mut g.roles.cross_replica_means);
        if wanted.is_empty() {
            return Ok(false);
        }
        let mut done = Vec::with_capacity(wanted.len());
        for local in wanted {
            let readers = g.outlet_consumers(local);
            let name = g.node(local.node).name.clone();
            let mut b = GraphBuilder::new(g);
            let global = b.with_scope(&format!("sync/{name}"), |b| b.all_reduce_now(&[local], ReduceOp::Mean))?[0];
            for (reader, input) in readers {
                g.set_input(reader, input, global);
            }
            g.roles.replace(local, global);
            done.push(global);
        }
        g.roles.cross_replica_means = done;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Op, Outlet, Shape};

    #[test]
    fn readers_see_the_mean_over_replicas() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let mean = b.reduce_mean(x, &[0], false)?;
        let centered = b.sub(x, mean)?;
        g.roles.cross_replica_means.push(mean);
        g.roles.predictions.insert("y".into(), centered);
        assert!(SyncBatchStatistics.run(&mut g)?);
        g.check()?;
        let read = g.node(centered.node).inputs[1];
        assert!(matches!(g.node(read.node).op, Op::AllReduce(ref a) if a.immediate && a.reduce == ReduceOp::Mean));
        assert_eq!(g.node(read.node).inputs, vec![mean]);
        assert_eq!(g.roles.cross_replica_means, vec![Outlet::new(read.node, 0)]);
        Ok(())
    }
}
