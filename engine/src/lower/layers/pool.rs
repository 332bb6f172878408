//! `MaxPool2d`, `AvgPool2d`, the global average poolings and `ZeroPadding2D` over NHWC
//! inputs.

use super::super::{LowerError, build::Lowering};
use crate::spec::{FieldPath, Pool2d, ZeroPadding2D};
use engine_graph::{Dim, Outlet, layers, ops::Window};

#[derive(Clone, Copy)]
pub enum Kind {
    Max,
    Avg,
}

pub fn lower(
    cx: &mut Lowering<'_, '_, '_>,
    p: &Pool2d,
    kind: Kind,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let layer = match kind {
        Kind::Max => "MaxPooling2D",
        Kind::Avg => "AveragePooling2D",
    };
    let shape = cx.shape_of(x)?;
    let hw = match shape.dims() {
        [n, Dim::Known(h), Dim::Known(w), Dim::Known(_)] if n.is_batch() => [*h, *w],
        _ => {
            return Err(cx.shape_error(
                path,
                format!("{layer} needs an input of shape [batch, height, width, channels], got {shape}"),
            ));
        }
    };
    let window = Window { kernel: p.pool_size.0, strides: p.strides().0, padding: p.padding };
    let [ph, pw] = p.pool_size.0;
    let (out_hw, _) = window
        .output(hw)
        .map_err(|why| cx.shape_error(path, format!("pool_size ({ph}, {pw}) does not fit the input {shape}: {why}")))?;
    let channels = shape.dims().last().and_then(|d| d.known()).unwrap_or(1);
    cx.check_flops(path, &[out_hw[0], out_hw[1], channels, ph, pw].map(|d| d as u64))?;
    cx.b.with_scope(name, |b| match kind {
        Kind::Max => b.max_pool2d(x, window),
        Kind::Avg => b.avg_pool2d(x, window),
    })
    .map_err(|e| cx.graph_error(path, e))
}

/// Both global average poolings: the mean over every axis between the batch and the
/// features.
pub fn global_average(
    cx: &mut Lowering<'_, '_, '_>,
    rank: usize,
    layer: &str,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let shape = cx.shape_of(x)?;
    let fits = shape.rank() == rank
        && shape.dims().first().is_some_and(|d| d.is_batch())
        && shape.dims()[1..].iter().all(|d| d.known().is_some_and(|n| n > 0));
    if !fits {
        let want = if rank == 4 { "[batch, height, width, channels]" } else { "[batch, steps, features]" };
        return Err(cx.shape_error(path, format!("{layer} needs an input of shape {want}, got {shape}")));
    }
    cx.b.with_scope(name, |b| layers::global_average(b, x, rank)).map_err(|e| cx.graph_error(path, e))
}

pub fn zero_padding(
    cx: &mut Lowering<'_, '_, '_>,
    z: &ZeroPadding2D,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let shape = cx.shape_of(x)?;
    if !matches!(shape.dims(), [n, Dim::Known(_), Dim::Known(_), Dim::Known(_)] if n.is_batch()) {
        return Err(cx.shape_error(
            path,
            format!("ZeroPadding2D needs an input of shape [batch, height, width, channels], got {shape}"),
        ));
    }
    let layer = layers::ZeroPadding2D { padding: z.padding.0 };
    cx.b.with_scope(name, |b| layer.build(b, x)).map_err(|e| cx.graph_error(path, e))
}
