//! Adam (Kingma & Ba), in TensorFlow's form with the bias correction folded into the step size.

use super::{blend, slot};
use crate::{DType, GraphBuilder, Initializer, Outlet, Result};

/// The bias-corrected step size `lr * sqrt(1 - beta2^t) / (1 - beta1^t)`, `t = step + 1`.
/// Built once per graph and shared by every variable.
pub(super) fn corrected_lr(
    b: &mut GraphBuilder<'_>,
    lr: Outlet,
    step: Outlet,
    beta1: f32,
    beta2: f32,
) -> Result<Outlet> {
    b.with_scope("adam", |b| {
        let s = b.cast(step, DType::F32)?;
        let one = b.scalar(1.0)?;
        let t = b.add(s, one)?;
        let pow = |b: &mut GraphBuilder<'_>, beta: f32| -> Result<Outlet> {
            let ln = b.scalar(beta.ln())?;
            let e = b.mul(t, ln)?;
            b.exp(e)
        };
        let b1t = pow(b, beta1)?;
        let b2t = pow(b, beta2)?;
        let c2 = b.sub(one, b2t)?;
        let c2 = b.sqrt(c2)?;
        let c1 = b.sub(one, b1t)?;
        let ratio = b.div(c2, c1)?;
        b.mul(lr, ratio)
    })
}

pub(super) struct Params {
    pub beta1: f32,
    pub beta2: f32,
    pub epsilon: f32,
    /// AdamW's `(weight_decay, learning_rate)`: the variable first loses
    /// `learning_rate * weight_decay` of itself (Keras applies the decay before the
    /// Adam step, with the schedule's rate, not the bias-corrected one).
    pub decay: Option<(f32, Outlet)>,
}

pub(super) fn update(
    b: &mut GraphBuilder<'_>,
    var: Outlet,
    g: Outlet,
    lr_t: Outlet,
    p: &Params,
) -> Result<Vec<Outlet>> {
    let (beta1, beta2, epsilon) = (p.beta1, p.beta2, p.epsilon);
    let m = slot(b, var, "Adam", Initializer::Zeros)?;
    let v = slot(b, var, "Adam_1", Initializer::Zeros)?;
    let m_new = blend(b, beta1, m, 1.0 - beta1, g)?;
    let g2 = b.square(g)?;
    let v_new = blend(b, beta2, v, 1.0 - beta2, g2)?;
    let root = b.sqrt(v_new)?;
    let eps = b.scalar(epsilon)?;
    let denom = b.add(root, eps)?;
    let dir = b.div(m_new, denom)?;
    let step = b.mul(lr_t, dir)?;
    let decayed = match p.decay {
        Some((wd, lr)) => {
            let wd = b.scalar(wd)?;
            let rate = b.mul(lr, wd)?;
            let loss = b.mul(var, rate)?;
            b.sub(var, loss)?
        }
        None => var,
    };
    let new = b.sub(decayed, step)?;
    Ok(vec![b.assign(m, m_new)?, b.assign(v, v_new)?, b.assign(var, new)?])
}
