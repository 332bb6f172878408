//! All-reduce of a bucket of tensors across the replicas of a strategy.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};
use serde::{Deserialize, Serialize};
use std::fmt;

/// How values from replicas combine. Explicit rather than implied: a strategy that scales
/// the loss by the global batch (TensorFlow's `compute_average_loss`) sums gradients; one
/// that does not would average them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Mean,
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
        })
    }
}

/// Inputs: the tensors of one bucket; outputs: the same tensors reduced over every
/// replica. A bucket travels as one message (packed), so small gradients share the
/// latency of one collective. `bucket` is the bucket's place in the order every replica
/// launches them in.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AllReduce {
    pub reduce: ReduceOp,
    pub bucket: usize,
    /// Read inside the step (synchronized batch statistics and, in the backward pass,
    /// their gradients), so launched where it stands: never packed into a bucket with
    /// gradients, which would wait on values computed from it.
    #[serde(default)]
    pub immediate: bool,
}

impl OpDef for AllReduce {
    fn name(&self) -> &'static str {
        "AllReduce"
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        if let Some(f) = inputs.iter().find(|f| !f.dtype.is_float()) {
            return Err(format!("only float tensors are all-reduced, found {f}"));
        }
        Ok(inputs.to_vec())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        inputs.iter().map(|f| f.shape.num_elements(batch) as u64).sum()
    }
    fn is_pure(&self) -> bool {
        false
    }
    /// Replica `r` holds `y = reduce_j(x_j)`, and its loss reaches `x_r` through every
    /// replica's `y`: the gradient is the same reduction of the output gradients (for a
    /// mean, `d y / d x_r = 1 / R` and `sum_j g_j / R` is the mean of the `g_j`).
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let n = ctx.num_inputs();
        let mut gys = Vec::with_capacity(n);
        for i in 0..n {
            gys.push(ctx.out_grad(i)?);
        }
        let reduced = ctx.b.all_reduce_now(&gys, self.reduce)?;
        for (i, g) in reduced.into_iter().enumerate() {
            if ctx.needs(i) {
                ctx.set(i, g);
            }
        }
        Ok(())
    }
}

impl GraphBuilder<'_> {
    /// One all-reduce node over `xs`; returns its node's outputs, one per input.
    pub fn all_reduce(&mut self, xs: &[Outlet], reduce: ReduceOp, bucket: usize) -> Result<Vec<Outlet>> {
        let op = AllReduce { reduce, bucket, immediate: false };
        let id = self.node(&format!("AllReduce_bucket_{bucket}"), op.into(), xs)?;
        Ok((0..xs.len()).map(|i| Outlet::new(id, i)).collect())
    }

    /// An [`AllReduce::immediate`] one: its value is needed within the step.
    pub fn all_reduce_now(&mut self, xs: &[Outlet], reduce: ReduceOp) -> Result<Vec<Outlet>> {
        let op = AllReduce { reduce, bucket: usize::MAX, immediate: true };
        let id = self.node("AllReduce", op.into(), xs)?;
        Ok((0..xs.len()).map(|i| Outlet::new(id, i)).collect())
    }
}
