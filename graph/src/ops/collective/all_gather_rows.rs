//! The cross-replica reduction of a row-sparse gradient (TensorFlow's `IndexedSlices`):
//! replicas exchange the rows they looked up, never the whole table.

use super::ReduceOp;
use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{
        Arity, OpDef,
        shape::{mask_shape, row_of},
    },
};

/// Inputs `(indices [...] i64, updates indices.shape ++ row)`: one replica's rows of a
/// `rows`-row gradient. Every replica sends its indices and updates to every other (an
/// all-gather: `k` looked-up rows cost `k` rows on the wire, whatever the table's size),
/// then adds all of them, in replica order, into:
/// - output 0, `[rows] ++ row`: the reduced gradient, as `AllReduce` would give it for
///   the scattered dense gradients (divided by the replica count for `Mean`);
/// - output 1, a bool `[rows, 1, ...]`: the rows any replica looked up, which sparse
///   optimizer updates are restricted to.
///
/// With a single replica this is `ScatterAddRows` plus `RowsTouched`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AllGatherRows {
    pub rows: usize,
    pub reduce: ReduceOp,
}

impl OpDef for AllGatherRows {
    fn name(&self) -> &'static str {
        "AllGatherRows"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let updates = &inputs[1];
        if !updates.dtype.is_float() {
            return Err(format!("only float rows are gathered, found {updates}"));
        }
        let row = row_of(&inputs[0], updates)?;
        let mut dims = vec![Dim::Known(self.rows)];
        dims.extend_from_slice(row);
        Ok(vec![Fact::new(updates.dtype, Shape(dims)), Fact::new(DType::Bool, mask_shape(self.rows, row.len()))])
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        inputs[1].shape.num_elements(batch) as u64
    }
    fn is_pure(&self) -> bool {
        false
    }
    /// Every replica's sum reads every replica's updates, so replica `r`'s update `i` gets
    /// the reduction of the sum's gradients over the replicas, at its row: the same rule
    /// as `AllReduce`'s, followed by `ScatterAddRows`' (a gather).
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        if !ctx.needs(1) {
            return Ok(());
        }
        let gy = ctx.out_grad(0)?;
        let reduced = ctx.b.all_reduce_now(&[gy], self.reduce)?[0];
        let g = ctx.b.gather(reduced, ctx.input(0))?;
        ctx.set(1, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    /// Returns `(sum, touched)`.
    pub fn all_gather_rows(
        &mut self,
        indices: Outlet,
        updates: Outlet,
        rows: usize,
        reduce: ReduceOp,
    ) -> Result<(Outlet, Outlet)> {
        let id = self.node("AllGatherRows", AllGatherRows { rows, reduce }.into(), &[indices, updates])?;
        Ok((Outlet::new(id, 0), Outlet::new(id, 1)))
    }
}
