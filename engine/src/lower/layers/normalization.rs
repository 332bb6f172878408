//! `BatchNormalization` and `LayerNormalization`: the spec's fields and shape errors
//! around the graph's Keras-named layers (`engine_graph::layers`), which the Rust API
//! builds too.

use super::super::{LowerError, Mode, build::Lowering};
use crate::spec::{BatchNormalization, FieldPath, LayerNormalization};
use engine_graph::{Outlet, layers};

/// Both layers normalize per feature of `[batch, ..., features]`: anything else is named
/// at the spec's layer.
fn features(cx: &Lowering<'_, '_, '_>, layer: &str, x: Outlet, path: &FieldPath) -> Result<(), LowerError> {
    let shape = cx.shape_of(x)?;
    match (shape.dims().first(), shape.dims().last().and_then(|d| d.known())) {
        (Some(n), Some(_)) if n.is_batch() && shape.rank() >= 2 => Ok(()),
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
    features(cx, "BatchNormalization", x, path)?;
    let layer = layers::BatchNormalization {
        momentum: n.momentum,
        epsilon: n.epsilon,
        center: n.center,
        scale: n.scale,
        synchronized: n.synchronized,
    };
    let training = cx.mode == Mode::Train;
    cx.b.with_scope(name, |b| layer.build(b, x, training)).map_err(|e| cx.graph_error(path, e))
}

pub fn layer_norm(
    cx: &mut Lowering<'_, '_, '_>,
    n: &LayerNormalization,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    features(cx, "LayerNormalization", x, path)?;
    let layer = layers::LayerNormalization { epsilon: n.epsilon, center: n.center, scale: n.scale };
    cx.b.with_scope(name, |b| layer.build(b, x)).map_err(|e| cx.graph_error(path, e))
}
