//! Adagrad: per-coordinate step sizes from the running sum of squared gradients.

use super::slot;
use crate::{GraphBuilder, Initializer, Outlet, Result};

pub(super) fn update(
    b: &mut GraphBuilder<'_>,
    var: Outlet,
    g: Outlet,
    lr: Outlet,
    initial_accumulator: f32,
    epsilon: f32,
) -> Result<Vec<Outlet>> {
    let accum = slot(b, var, "Adagrad", Initializer::Constant(initial_accumulator))?;
    let g2 = b.square(g)?;
    let accum_new = b.add(accum, g2)?;
    let root = b.sqrt(accum_new)?;
    let eps = b.scalar(epsilon)?;
    let denom = b.add(root, eps)?;
    let scaled = b.mul(lr, g)?;
    let step = b.div(scaled, denom)?;
    let new = b.sub(var, step)?;
    Ok(vec![b.assign(accum, accum_new)?, b.assign(var, new)?])
}
