//! Gradient descent, with TensorFlow's momentum (and Nesterov) when momentum is non-zero.

use super::slot;
use crate::{GraphBuilder, Initializer, Outlet, Result};

pub(super) fn update(
    b: &mut GraphBuilder<'_>,
    var: Outlet,
    g: Outlet,
    lr: Outlet,
    momentum: f32,
    nesterov: bool,
) -> Result<Vec<Outlet>> {
    if momentum == 0.0 {
        let step = b.mul(lr, g)?;
        let new = b.sub(var, step)?;
        return Ok(vec![b.assign(var, new)?]);
    }
    // accum = momentum * accum + g; var -= lr * accum (or lr * (g + momentum * accum)).
    let accum = slot(b, var, "Momentum", Initializer::Zeros)?;
    let m = b.scalar(momentum)?;
    let decayed = b.mul(m, accum)?;
    let accum_new = b.add(decayed, g)?;
    let direction = if nesterov {
        let ahead = b.mul(m, accum_new)?;
        b.add(g, ahead)?
    } else {
        accum_new
    };
    let step = b.mul(lr, direction)?;
    let new = b.sub(var, step)?;
    Ok(vec![b.assign(accum, accum_new)?, b.assign(var, new)?])
}
