//! An all-reduce on every gradient, before the optimizer reads it (`mirrored`,
//! `multi_worker`).

use crate::{Graph, GraphBuilder, Result, ops::ReduceOp, passes::Pass, row_sparse::row_sparse};

/// Runs after autodiff and before the optimizer: each `(variable, gradient)` of
/// `roles.gradients` gets a one-tensor `AllReduce` (an `AllGatherRows` of the looked-up
/// rows, for a row-sparse gradient) and the role points at its output, so
/// every replica applies the same reduced gradient to its copy of the variable. The
/// fusion pass then groups these into buckets.
pub struct AllReduceGradients {
    pub reduce: ReduceOp,
}

impl Pass for AllReduceGradients {
    fn name(&self) -> &str {
        "all-reduce-gradients"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        let pairs = g.roles.gradients.clone();
        let mut b = GraphBuilder::new(g);
        let mut reduced = Vec::with_capacity(pairs.len());
        for (i, (var, grad)) in pairs.iter().enumerate() {
            let var_name = b.graph().node(*var).name.clone();
            let out = match row_sparse(b.graph(), *grad) {
                // Only the looked-up rows travel (an embedding table's gradient is mostly
                // zeros).
                Some(s) => b.with_scope(&format!("allgather/{var_name}"), |b| {
                    Ok(b.all_gather_rows(s.indices, s.updates, s.rows, self.reduce)?.0)
                })?,
                None => b.with_scope(&format!("allreduce/{var_name}"), |b| b.all_reduce(&[*grad], self.reduce, i))?[0],
            };
            reduced.push((*var, out));
        }
        let changed = !reduced.is_empty();
        g.roles.gradients = reduced;
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Initializer, Op, Shape, autodiff::Autodiff};

    #[test]
    fn every_gradient_is_reduced_before_use() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let w = b.variable("w", &[3, 2], Initializer::Ones, true)?;
        let v = b.variable("v", &[2], Initializer::Ones, true)?;
        let y = b.matmul(x, w)?;
        let y = b.add(y, v)?;
        let loss = b.reduce_sum(y, &[], false)?;
        g.roles.loss = Some(loss);
        Autodiff.run(&mut g)?;
        assert!(AllReduceGradients { reduce: ReduceOp::Sum }.run(&mut g)?);
        g.check()?;
        assert_eq!(g.roles.gradients.len(), 2);
        for (_, grad) in &g.roles.gradients {
            assert!(matches!(g.node(grad.node).op, Op::AllReduce(ref a) if a.reduce == ReduceOp::Sum));
            assert_eq!(g.node(grad.node).inputs.len(), 1);
        }
        Ok(())
    }
}
