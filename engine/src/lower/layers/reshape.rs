//! `Flatten` and `Reshape`: the batch dimension stays, the rest is rearranged.

use super::super::{LowerError, build::Lowering, limits::product};
use crate::spec::{FieldPath, Reshape};
use engine_graph::{Dim, Outlet, Shape};

pub fn flatten(cx: &mut Lowering<'_, '_, '_>, name: &str, x: Outlet, path: &FieldPath) -> Result<Outlet, LowerError> {
    let shape = cx.shape_of(x)?;
    if !shape.dims().first().is_some_and(|d| d.is_batch()) {
        return Err(cx.shape_error(path, format!("Flatten needs an input with a batch dimension, got {shape}")));
    }
    cx.b.with_scope(name, |b| b.flatten(x)).map_err(|e| cx.graph_error(path, e))
}

pub fn reshape(
    cx: &mut Lowering<'_, '_, '_>,
    r: &Reshape,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let shape = cx.shape_of(x)?;
    let per_example = Shape(shape.dims().get(1..).unwrap_or_default().to_vec()).volume().and_then(Dim::known);
    let known: Vec<u64> = r.target_shape.iter().filter(|&&d| d > 0).map(|&d| d as u64).collect();
    let fits = match (per_example.map(|n| n as u64), product(&known), r.target_shape.contains(&-1)) {
        (Some(n), Some(target), false) => n == target,
        (Some(n), Some(target), true) => target > 0 && n % target == 0,
        _ => false,
    };
    if !fits || !shape.dims().first().is_some_and(|d| d.is_batch()) {
        let have = per_example.map(|n| format!("{n} elements per example")).unwrap_or_else(|| "no fixed size".into());
        return Err(cx.shape_error(
            &path.field("target_shape"),
            format!("cannot reshape {shape} ({have}) to [batch, {}]", join(&r.target_shape)),
        ));
    }
    cx.b.with_scope(name, |b| b.reshape_batched(x, &r.target_shape)).map_err(|e| cx.graph_error(path, e))
}

fn join(dims: &[i64]) -> String {
    dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}
