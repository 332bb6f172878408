//! Mean squared error per example (Keras' `mean_squared_error`): a composite.

use crate::{GraphBuilder, GraphError, Outlet, Result};

impl GraphBuilder<'_> {
    /// `mean((predictions - targets)^2)` over the last axis, one value per example.
    pub fn mean_squared_error(&mut self, predictions: Outlet, targets: Outlet) -> Result<Outlet> {
        let (p, t) = (self.fact(predictions)?.clone(), self.fact(targets)?.clone());
        if p != t {
            return Err(GraphError::invalid("mean squared error", format!("predictions {p} and targets {t} differ")));
        }
        self.with_scope("mean_squared_error", |b| {
            let d = b.sub(predictions, targets)?;
            let sq = b.square(d)?;
            if p.rank() <= 1 {
                return Ok(sq);
            }
            b.reduce_mean(sq, &[p.rank() - 1], false)
        })
    }
}
