//! The sum of updates into the rows their indices name: the gradient of `Gather`.

use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Inputs `(indices [...] i64, updates indices.shape ++ row)`; output `[rows] ++ row`,
/// zeros except that `updates[i]` is added to row `indices[i]` (repeated indices add up).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScatterAddRows {
    pub rows: usize,
}

impl OpDef for ScatterAddRows {
    fn name(&self) -> &'static str {
        "UnsortedSegmentSum"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::expect_dtype(&inputs[1], DType::F32, "updates")?;
        let row = row_of(&inputs[0], &inputs[1])?;
        let mut dims = vec![Dim::Known(self.rows)];
        dims.extend_from_slice(row);
        Ok(vec![Fact::f32(Shape(dims))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        if !ctx.needs(1) {
            return Ok(());
        }
        let gy = ctx.out_grad(0)?;
        let g = ctx.b.gather(gy, ctx.input(0))?;
        ctx.set(1, g);
        Ok(())
    }
}

/// The shape of one row of `updates` (what follows the indices' shape), after checking
/// that the indices are integers, that `updates` starts with their shape and that its
/// rows have known sizes: the inputs of every op that adds rows into a table.
pub(crate) fn row_of<'a>(indices: &Fact, updates: &'a Fact) -> Result<&'a [Dim], String> {
    rules::expect_dtype(indices, DType::I64, "indices")?;
    let k = indices.rank();
    if updates.rank() < k || updates.shape.dims()[..k] != indices.shape.dims()[..] {
        return Err(format!("updates {} do not start with the indices' shape {}", updates.shape, indices.shape));
    }
    let row = &updates.shape.dims()[k..];
    if row.iter().any(|d| d.is_batch()) {
        return Err(format!("rows of {} must have known sizes", updates.shape));
    }
    Ok(row)
}

impl GraphBuilder<'_> {
    pub fn scatter_add_rows(&mut self, indices: Outlet, updates: Outlet, rows: usize) -> Result<Outlet> {
        self.op(ScatterAddRows { rows }.into(), &[indices, updates])
    }
}
