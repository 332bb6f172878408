//! Undoing a broadcast: the gradient of a broadcast operand is summed over the axes the
//! broadcast stretched.

use crate::{Dim, GraphBuilder, Outlet, Result, Shape};

impl GraphBuilder<'_> {
    /// Sums `g` down to `target` (the shape of an operand that was broadcast to `g`'s shape).
    pub fn sum_to(&mut self, g: Outlet, target: &Shape) -> Result<Outlet> {
        let shape = self.fact(g)?.shape.clone();
        if &shape == target {
            return Ok(g);
        }
        let lead = shape.rank() - target.rank().min(shape.rank());
        let mut axes: Vec<usize> = (0..lead).collect();
        for (i, d) in target.dims().iter().enumerate() {
            if *d == Dim::Known(1) && shape.dim(lead + i) != Dim::Known(1) {
                axes.push(lead + i);
            }
        }
        if axes.is_empty() {
            return self.reshape(g, target.clone());
        }
        // Only leading axes (a bias over the last axes): the plain sum is already the target
        // shape, and it is the form fusion passes recognize.
        if axes.iter().all(|&a| a < lead) {
            return self.reduce_sum(g, &axes, false);
        }
        let summed = self.reduce_sum(g, &axes, true)?;
        if &self.fact(summed)?.shape == target { Ok(summed) } else { self.reshape(summed, target.clone()) }
    }
}
