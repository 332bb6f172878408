//! `BatchNormalization` and `LayerNormalization`: their variables and moving averages
//! around the builder's normalization composites, which the `fuse-normalization` pass
//! turns into single ops.

use super::super::{LowerError, Mode, build::Lowering};
use crate::spec::{BatchNormalization, FieldPath, LayerNormalization};
use engine_graph::{GraphBuilder, Initializer, Outlet, Result};

/// The last axis's size, which both layers normalize per feature of.
fn features(cx: &Lowering<'_, '_, '_>, layer: &str, x: Outlet, path: &FieldPath) -> Result<(usize, usize), LowerError> {
    let shape = cx.shape_of(x)?;
    match (shape.dims().first(), shape.dims().last().and_then(|d| d.known())) {
        (Some(n), Some(c)) if n.is_batch() && shape.rank() >= 2 => Ok((c, shape.rank())),
        _ => Err(cx.shape_error(path, format!("{layer} needs an input of shape [batch, ..., features], got {shape}"))),
    }
}

pub fn batch_norm(
    cx: &mut Lowering<'_, '_, '_>,
    n: &BatchNormalization,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let (c, rank) = features(cx, "BatchNormalization", x, path)?;
    let training = cx.mode == Mode::Train;
    let axes: Vec<usize> = (0..rank - 1).collect();
    let (out, updates, synced) =
        cx.b.with_scope(name, |b| {
            let gamma = n.scale.then(|| b.variable("gamma", &[c], Initializer::Ones, true)).transpose()?;
            let beta = n.center.then(|| b.variable("beta", &[c], Initializer::Zeros, true)).transpose()?;
            let moving_mean = b.variable("moving_mean", &[c], Initializer::Zeros, false)?;
            let moving_var = b.variable("moving_variance", &[c], Initializer::Ones, false)?;
            let mut updates = Vec::new();
            let mut synced = Vec::new();
            let (mean, var) = if training {
                let (mean, var) = if n.synchronized {
                    // E[x^2] - E[x]^2: the two means are what replicas average.
                    let mean = b.reduce_mean(x, &axes, false)?;
                    let sq = b.square(x)?;
                    let mean_sq = b.reduce_mean(sq, &axes, false)?;
                    synced.extend([mean, mean_sq]);
                    let m2 = b.square(mean)?;
                    let var = b.sub(mean_sq, m2)?;
                    let zero = b.scalar(0.0)?;
                    (mean, b.maximum(var, zero)?)
                } else {
                    b.batch_moments(x)?
                };
                updates.push((moving_mean, moving_average(b, moving_mean, mean, n.momentum)?));
                updates.push((moving_var, moving_average(b, moving_var, var, n.momentum)?));
                (mean, var)
            } else {
                (moving_mean, moving_var)
            };
            Ok((b.batch_normalize(x, (mean, var), gamma, beta, n.epsilon)?, updates, synced))
        })
        .map_err(|e| cx.graph_error(path, e))?;
    let roles = &mut cx.b.graph_mut().roles;
    roles.updates.extend(updates.into_iter().map(|(v, u)| (v.node, u)));
    // The updates read the batch statistics after synchronization: the pass rewires every
    // reader, these included.
    roles.cross_replica_means.extend(synced);
    Ok(out)
}

/// `moving * momentum + batch * (1 - momentum)`.
fn moving_average(b: &mut GraphBuilder<'_>, moving: Outlet, batch: Outlet, momentum: f32) -> Result<Outlet> {
    let keep = b.scalar(momentum)?;
    let kept = b.mul(moving, keep)?;
    let take = b.scalar(1.0 - momentum)?;
    let taken = b.mul(batch, take)?;
    b.add(kept, taken)
}

pub fn layer_norm(
    cx: &mut Lowering<'_, '_, '_>,
    n: &LayerNormalization,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let (c, _) = features(cx, "LayerNormalization", x, path)?;
    cx.b.with_scope(name, |b| {
        let gamma = n.scale.then(|| b.variable("gamma", &[c], Initializer::Ones, true)).transpose()?;
        let beta = n.center.then(|| b.variable("beta", &[c], Initializer::Zeros, true)).transpose()?;
        b.layer_normalize(x, gamma, beta, n.epsilon)
    })
    .map_err(|e| cx.graph_error(path, e))
}
