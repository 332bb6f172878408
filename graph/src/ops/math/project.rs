//! A linear map on the last axis of a tensor of any rank (Keras' `Dense` on sequences,
//! attention's projections), as reshapes around one matrix product: one GEMM over all
//! tokens of the batch rather than a product per example.

use crate::{Dim, GraphBuilder, GraphError, Outlet, Result, Shape};

impl GraphBuilder<'_> {
    /// `x [..., k] @ w [k, m] -> [..., m]`.
    pub fn project(&mut self, x: Outlet, w: Outlet) -> Result<Outlet> {
        let shape = self.fact(x)?.shape.clone();
        let m = self.fact(w)?.shape.dims().last().copied().unwrap_or(Dim::Known(0));
        if shape.rank() <= 2 {
            return self.matmul(x, w);
        }
        let lead = Shape(shape.dims()[..shape.rank() - 1].to_vec());
        let rows = lead
            .volume()
            .ok_or_else(|| GraphError::invalid("projection", format!("{shape} has more than one batch dimension")))?;
        let k = shape.dim(shape.rank() - 1);
        let flat = self.reshape(x, Shape(vec![rows, k]))?;
        let y = self.matmul(flat, w)?;
        let mut dims = lead.dims().to_vec();
        dims.push(m);
        self.reshape(y, Shape(dims))
    }
}
