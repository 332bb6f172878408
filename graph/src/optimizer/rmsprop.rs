//! RMSProp in TensorFlow 1's form (mean square from one, epsilon inside the square root)
//! or Keras' (from zero, epsilon after the root), with optional momentum and centering.

use super::{blend, slot};
use crate::{GraphBuilder, Initializer, Outlet, Result};

pub(super) struct Params {
    pub decay: f32,
    pub momentum: f32,
    pub epsilon: f32,
    pub centered: bool,
    pub keras: bool,
}

pub(super) fn update(b: &mut GraphBuilder<'_>, var: Outlet, g: Outlet, lr: Outlet, p: &Params) -> Result<Vec<Outlet>> {
    let mut assigns = Vec::new();
    // TensorFlow 1 starts the mean square at one, so the first steps are not huge; Keras at
    // zero, so its first step moves every weight by about lr / sqrt(1 - decay).
    let init = if p.keras { Initializer::Zeros } else { Initializer::Ones };
    let ms = slot(b, var, "RMSProp", init)?;
    let g2 = b.square(g)?;
    let ms_new = blend(b, p.decay, ms, 1.0 - p.decay, g2)?;
    assigns.push(b.assign(ms, ms_new)?);
    let mut denom = ms_new;
    if p.centered {
        let mg = slot(b, var, "RMSProp_2", Initializer::Zeros)?;
        let mg_new = blend(b, p.decay, mg, 1.0 - p.decay, g)?;
        assigns.push(b.assign(mg, mg_new)?);
        let mg2 = b.square(mg_new)?;
        denom = b.sub(denom, mg2)?;
    }
    let eps = b.scalar(p.epsilon)?;
    let root = if p.keras {
        let root = b.sqrt(denom)?;
        b.add(root, eps)?
    } else {
        let denom = b.add(denom, eps)?;
        b.sqrt(denom)?
    };
    let scaled = b.mul(lr, g)?;
    let mut step = b.div(scaled, root)?;
    if p.momentum != 0.0 {
        let mom = slot(b, var, "RMSProp_1", Initializer::Zeros)?;
        let m = b.scalar(p.momentum)?;
        let decayed = b.mul(m, mom)?;
        step = b.add(decayed, step)?;
        assigns.push(b.assign(mom, step)?);
    }
    let new = b.sub(var, step)?;
    assigns.push(b.assign(var, new)?);
    Ok(assigns)
}
