//! Rows of a table picked by integer indices: an embedding lookup.

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Inputs `(params [rows, ...], indices [...] i64)`; output `indices.shape ++
/// params.shape[1..]`: row `indices[i]` of `params` at `i`. An index outside `0..rows` is
/// a kernel error naming the node and the index, never a wrapped read.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Gather;

impl OpDef for Gather {
    fn name(&self) -> &'static str {
        "GatherV2"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (params, indices) = (&inputs[0], &inputs[1]);
        rules::expect_dtype(params, DType::F32, "params")?;
        rules::expect_dtype(indices, DType::I64, "indices")?;
        if params.rank() == 0 || params.shape.dims().iter().any(|d| d.is_batch()) {
            return Err(format!("params must be a table of rows with known sizes, found {}", params.shape));
        }
        let mut dims = indices.shape.dims().to_vec();
        dims.extend_from_slice(&params.shape.dims()[1..]);
        Ok(vec![Fact::f32(Shape(dims))])
    }
    /// The rows' gradient is the output gradient added into the rows it was read from
    /// (TensorFlow's `IndexedSlices`, densified); indices have none.
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        if !ctx.needs(0) {
            return Ok(());
        }
        let gy = ctx.out_grad(0)?;
        let rows = ctx.input_fact(0)?.shape.dim(0).known().unwrap_or(0);
        let g = ctx.b.scatter_add_rows(ctx.input(1), gy, rows)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn gather(&mut self, params: Outlet, indices: Outlet) -> Result<Outlet> {
        self.op(Gather.into(), &[params, indices])
    }
}
