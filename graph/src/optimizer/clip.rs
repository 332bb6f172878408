//! Clipping by global norm (`tf.clip_by_global_norm`).

use crate::{GraphBuilder, Outlet, Result};

/// Scales every gradient by `clip / max(global_norm, clip)`.
pub(crate) fn clip_by_global_norm(b: &mut GraphBuilder<'_>, grads: &[Outlet], clip: f32) -> Result<Vec<Outlet>> {
    b.with_scope("clip_by_global_norm", |b| {
        let mut squares = Vec::with_capacity(grads.len());
        for &g in grads {
            let sq = b.square(g)?;
            squares.push(b.reduce_sum(sq, &[], false)?);
        }
        let total = if squares.len() == 1 { squares[0] } else { b.add_n(&squares)? };
        let norm = b.sqrt(total)?;
        let c = b.scalar(clip)?;
        let denom = b.maximum(norm, c)?;
        let scale = b.div(c, denom)?;
        grads.iter().map(|&g| b.mul(g, scale)).collect()
    })
}
