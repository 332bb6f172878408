//! The fused normalization ops (batch and layer), with and without their affine inputs,
//! through their normalized output and through their statistics outputs, and batch
//! normalization with its folded ReLU: the backward op's kernels (native and generic)
//! against finite differences of the forward kernels.

use crate::harness::{check, input};
use anyhow::Result;
use engine_graph::{
    GraphBuilder, Outlet,
    ops::{FusedNormalization, Normalization},
};

fn fused(
    b: &mut GraphBuilder<'_>,
    x: &[Outlet],
    kind: Normalization,
    scale: bool,
    center: bool,
    output: usize,
) -> engine_graph::Result<Outlet> {
    fused_with(b, x, FusedNormalization { kind, epsilon: 1e-3, scale, center, relu: false }, output)
}

fn fused_with(
    b: &mut GraphBuilder<'_>,
    x: &[Outlet],
    op: FusedNormalization,
    output: usize,
) -> engine_graph::Result<Outlet> {
    let (scale, center) = (op.scale, op.center);
    let gamma = scale.then(|| x[1]);
    let beta = center.then(|| x[x.len() - 1]);
    let node = b.fused_normalization(op, x[0], gamma, beta)?;
    Ok(Outlet::new(node, output))
}

fn inputs(shape: &[usize], scale: bool, center: bool) -> Vec<crate::harness::Input> {
    let c = shape[shape.len() - 1];
    let mut v = vec![input(shape)];
    if scale {
        v.push(input(&[c]));
    }
    if center {
        v.push(input(&[c]));
    }
    v
}

#[test]
fn fused_batch_norm() -> Result<()> {
    for (scale, center) in [(true, true), (false, true), (true, false), (false, false)] {
        let kind = Normalization::Batch;
        check(&inputs(&[3, 2, 2, 3], scale, center), |b, x| fused(b, x, kind, scale, center, 0))?;
    }
    // Rank 2 (after a dense layer), and the statistics outputs the moving averages read.
    check(&inputs(&[5, 4], true, true), |b, x| fused(b, x, Normalization::Batch, true, true, 0))?;
    check(&inputs(&[4, 3], true, true), |b, x| fused(b, x, Normalization::Batch, true, true, 1))?;
    check(&inputs(&[4, 3], false, false), |b, x| fused(b, x, Normalization::Batch, false, false, 2))
}

/// About half of each feature's outputs are cut by the ReLU (the inputs are centered), so
/// both sides of the mask, the mask recomputed from beta, and its absence without beta.
#[test]
fn fused_batch_norm_with_relu() -> Result<()> {
    for (scale, center) in [(true, true), (false, true), (true, false), (false, false)] {
        let op = FusedNormalization { kind: Normalization::Batch, epsilon: 1e-3, scale, center, relu: true };
        check(&inputs(&[3, 2, 2, 3], scale, center), |b, x| fused_with(b, x, op.clone(), 0))?;
    }
    let op = FusedNormalization { kind: Normalization::Batch, epsilon: 1e-3, scale: true, center: true, relu: true };
    check(&inputs(&[6, 4], true, true), |b, x| fused_with(b, x, op.clone(), 0))?;
    // The statistics are the normalization's, before the ReLU.
    check(&inputs(&[4, 3], true, true), |b, x| fused_with(b, x, op.clone(), 2))
}

#[test]
fn fused_layer_norm() -> Result<()> {
    for (scale, center) in [(true, true), (false, true), (true, false), (false, false)] {
        let kind = Normalization::Layer;
        check(&inputs(&[2, 3, 5], scale, center), |b, x| fused(b, x, kind, scale, center, 0))?;
    }
    check(&inputs(&[3, 4], true, true), |b, x| fused(b, x, Normalization::Layer, true, true, 1))?;
    check(&inputs(&[3, 4], true, false), |b, x| fused(b, x, Normalization::Layer, true, false, 2))
}
