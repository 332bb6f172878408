//! `sum(x^2) / 2`, TensorFlow's `l2_loss` (weight decay): a composite.

use crate::{GraphBuilder, Outlet, Result};

impl GraphBuilder<'_> {
    pub fn l2_loss(&mut self, x: Outlet) -> Result<Outlet> {
        self.with_scope("l2_loss", |b| {
            let sq = b.square(x)?;
            let s = b.reduce_sum(sq, &[], false)?;
            let half = b.scalar(0.5)?;
            b.mul(s, half)
        })
    }
}
