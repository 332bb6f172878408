//! Which rows of a table a row-sparse gradient names: what sparse optimizer updates are
//! restricted to.

use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    ops::{Arity, OpDef},
};

/// Inputs `(indices [...] i64, updates indices.shape ++ row)`, as `ScatterAddRows`; output a
/// bool `[rows, 1, ...]` (one 1 per axis of a row, so it broadcasts over the table): true
/// where some index names the row. Taking the updates too keeps the mask in the same
/// place as the sum it describes (a ps task computes both from what the worker sent).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RowsTouched {
    pub rows: usize,
}

/// The mask's shape for a table of `rows` rows whose rows have `row_rank` axes.
pub(crate) fn mask_shape(rows: usize, row_rank: usize) -> Shape {
    let mut dims = vec![Dim::Known(rows)];
    dims.extend(std::iter::repeat_n(Dim::Known(1), row_rank));
    Shape(dims)
}

impl OpDef for RowsTouched {
    fn name(&self) -> &'static str {
        "RowsTouched"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let row = super::row_of(&inputs[0], &inputs[1])?;
        Ok(vec![Fact::new(DType::Bool, mask_shape(self.rows, row.len()))])
    }
}

impl GraphBuilder<'_> {
    pub fn rows_touched(&mut self, indices: Outlet, updates: Outlet, rows: usize) -> Result<Outlet> {
        self.op(RowsTouched { rows }.into(), &[indices, updates])
    }
}
