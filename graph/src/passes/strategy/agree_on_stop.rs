//! One final step for every task of a cluster that is asked to stop.

use crate::{DType, Graph, GraphBuilder, GraphError, Result, Shape, ops::ReduceOp, passes::Pass};

/// The feed (and fetch) name of the stop request.
pub const STOP_REQUEST: &str = "stop_request";

/// Runs after autodiff, before fusion (`multi_worker`): a scalar placeholder
/// [`STOP_REQUEST`], fed 1 by a task that was asked to stop (a SIGTERM from a preemption)
/// and 0 otherwise, summed by an all-reduce in the last gradient bucket. Every task then
/// fetches the same sum after the same step and, when it is not 0, stops after that step:
/// the chief checkpoints a step every task has finished, and no task waits for a peer that
/// left. Like the loss's, the one-element tensor rides in a bucket every step sends anyway.
pub struct AgreeOnStop;

impl Pass for AgreeOnStop {
    fn name(&self) -> &str {
        "agree-on-stop"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        if g.roles.inputs.contains_key(STOP_REQUEST) {
            return Ok(false);
        }
        if g.roles.gradients.is_empty() {
            return Err(GraphError::invalid(
                "training graph",
                "agree-on-stop runs after autodiff, and it has no gradients",
            ));
        }
        let bucket = g.roles.gradients.len();
        let mut b = GraphBuilder::new(g);
        let request = b.placeholder(STOP_REQUEST, DType::F32, Shape::known(&[]))?;
        let agreed = b.with_scope("allreduce/stop_request", |b| b.all_reduce(&[request], ReduceOp::Sum, bucket))?;
        g.roles.inputs.insert(STOP_REQUEST.into(), request);
        g.roles.fetches.insert(STOP_REQUEST.into(), agreed[0]);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Initializer, Op, autodiff::Autodiff};

    #[test]
    fn the_request_is_fed_and_its_sum_fetched_in_the_last_bucket() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let w = b.variable("w", &[3, 2], Initializer::Ones, true)?;
        let y = b.matmul(x, w)?;
        g.roles.loss = Some(GraphBuilder::new(&mut g).reduce_mean(y, &[], false)?);
        Autodiff.run(&mut g)?;
        assert!(AgreeOnStop.run(&mut g)?);
        g.check()?;
        let fed = g.roles.inputs[STOP_REQUEST];
        let agreed = g.roles.fetches[STOP_REQUEST];
        assert!(matches!(g.node(fed.node).op, Op::Placeholder(_)));
        assert_eq!(g.fact(fed)?.shape, Shape::known(&[]));
        let node = g.node(agreed.node);
        assert!(matches!(node.op, Op::AllReduce(ref a) if a.reduce == ReduceOp::Sum && a.bucket == 1), "{:?}", node.op);
        assert_eq!(node.inputs, vec![fed]);
        assert!(!AgreeOnStop.run(&mut g)?);
        Ok(())
    }
}
