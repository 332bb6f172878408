//! Batch and layer normalization as primitives (means, squares, a square root): what the
//! layers lower to, so that autodiff, every backend and every strategy see through them;
//! the `fuse-normalization` pass turns them into single ops where the arithmetic matches.

use crate::{GraphBuilder, Outlet, Result};

impl GraphBuilder<'_> {
    /// Batch statistics of `x` per feature (its last axis) over every other axis:
    /// `(mean, variance)`, the variance biased.
    pub fn batch_moments(&mut self, x: Outlet) -> Result<(Outlet, Outlet)> {
        let rank = self.fact(x)?.rank();
        let axes: Vec<usize> = (0..rank.saturating_sub(1)).collect();
        let mean = self.reduce_mean(x, &axes, false)?;
        let centered = self.sub(x, mean)?;
        let sq = self.square(centered)?;
        let var = self.reduce_mean(sq, &axes, false)?;
        Ok((mean, var))
    }

    /// `gamma * (x - mean) / sqrt(var + epsilon) + beta` with per-feature statistics,
    /// computed as `x * inv + (beta - mean * inv)`, `inv = gamma / sqrt(var + epsilon)`:
    /// two passes over the activations, the rest on `[features]`.
    pub fn batch_normalize(
        &mut self,
        x: Outlet,
        (mean, var): (Outlet, Outlet),
        gamma: Option<Outlet>,
        beta: Option<Outlet>,
        epsilon: f32,
    ) -> Result<Outlet> {
        let eps = self.scalar(epsilon)?;
        let v = self.add(var, eps)?;
        let root = self.sqrt(v)?;
        let one = self.scalar(1.0)?;
        let mut inv = self.div(one, root)?;
        if let Some(g) = gamma {
            inv = self.mul(inv, g)?;
        }
        let shift = self.mul(mean, inv)?;
        let shift = match beta {
            Some(beta) => self.sub(beta, shift)?,
            None => self.neg(shift)?,
        };
        let scaled = self.mul(x, inv)?;
        self.add(scaled, shift)
    }

    /// `gamma * (x - mean) / sqrt(var + epsilon) + beta` with the statistics of each row
    /// over its last axis.
    pub fn layer_normalize(
        &mut self,
        x: Outlet,
        gamma: Option<Outlet>,
        beta: Option<Outlet>,
        epsilon: f32,
    ) -> Result<Outlet> {
        let last = self.fact(x)?.rank().saturating_sub(1);
        let mean = self.reduce_mean(x, &[last], true)?;
        let centered = self.sub(x, mean)?;
        let sq = self.square(centered)?;
        let var = self.reduce_mean(sq, &[last], true)?;
        let eps = self.scalar(epsilon)?;
        let v = self.add(var, eps)?;
        let root = self.sqrt(v)?;
        let mut y = self.div(centered, root)?;
        if let Some(g) = gamma {
            y = self.mul(y, g)?;
        }
        if let Some(beta) = beta {
            y = self.add(y, beta)?;
        }
        Ok(y)
    }
}
