//! The composites that `BatchNormalization` (training) and `LayerNormalization` lower to
//! become one [`FusedNormalization`] each, before autodiff, so that the backward pass is
//! one [`FusedNormalizationGrad`](crate::ops::FusedNormalizationGrad) too.
//!
//! The layers keep lowering to primitives (means, squares, a square root): every backend
//! and every strategy understands those, and a model written by hand with the same
//! arithmetic is recognized as well. What is matched is the arithmetic, up to the order
//! of commutative operands; the synchronized batch normalization (E[x²] − E[x]², whose
//! two means replicas average) is a different composite and stays as it is.

use super::{Pass, fuse_bias_activation::sole_consumer, replace::replace_with_fused};
use crate::{
    Graph, NodeId, Op, Outlet, Result, Shape,
    ops::{FusedNormalization, Normalization},
};

#[derive(Debug, Default)]
pub struct FuseNormalization;

impl Pass for FuseNormalization {
    fn name(&self) -> &str {
        "fuse-normalization"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if !g.contains(id) {
                continue;
            }
            let found = match batch_norm(g, id)? {
                Some(f) => Some(f),
                None => layer_norm(g, id)?,
            };
            if let Some(f) = found {
                rewrite(g, f)?;
                changed = true;
            }
        }
        Ok(changed)
    }
}

/// A matched composite: what the fused op needs, the composite's mean and variance (read
/// by others, such as moving averages, which then read the fused op's), its output, and
/// its interior in an order in which each node's consumers go before it.
struct Found {
    op: FusedNormalization,
    x: Outlet,
    gamma: Option<Outlet>,
    beta: Option<Outlet>,
    mean: NodeId,
    var: NodeId,
    out: NodeId,
    interior: Vec<NodeId>,
}

fn out(id: NodeId) -> Outlet {
    Outlet::from(id)
}

/// The consumers of a node's only output.
fn consumers(g: &Graph, id: NodeId) -> Vec<NodeId> {
    g.outlet_consumers(out(id)).into_iter().map(|(c, _)| c).collect()
}

/// The sole consumer of `id` when it matches `is`.
fn only(g: &Graph, id: NodeId, is: impl Fn(&Op) -> bool) -> Option<NodeId> {
    sole_consumer(g, out(id)).filter(|&c| is(&g.node(c).op))
}

/// For a binary node reading `known`, its other operand (either order).
fn other(g: &Graph, id: NodeId, known: Outlet) -> Option<Outlet> {
    match g.node(id).inputs.as_slice() {
        [a, b] if *a == known => Some(*b),
        [a, b] if *b == known => Some(*a),
        _ => None,
    }
}

/// The value of a one-element f32 constant.
pub(super) fn scalar(g: &Graph, o: Outlet) -> Option<f32> {
    match &g.node(o.node).op {
        Op::Constant(c) => c.value.as_f32().and_then(|v| (v.len() == 1).then(|| v[0])),
        _ => None,
    }
}

/// Whether `o` is an f32 vector of `c` elements (a gamma or beta).
fn per_feature(g: &Graph, o: Outlet, c: usize) -> Result<bool> {
    Ok(g.fact(o)?.shape == Shape::known(&[c]) && g.fact(o)?.dtype == crate::DType::F32)
}

fn is_mean(op: &Op, axes: &[usize], keep: bool) -> bool {
    matches!(op, Op::ReduceMean(r) if r.axes == axes && r.keep_dims == keep)
}

/// The statistics' input, their mean node's axes, and the feature count, when `id` is a
/// mean over the axes of `kind`.
fn statistics(g: &Graph, id: NodeId, kind: Normalization) -> Result<Option<(Outlet, Vec<usize>, usize)>> {
    let Op::ReduceMean(r) = &g.node(id).op else { return Ok(None) };
    let x = g.node(id).inputs[0];
    let fact = g.fact(x)?;
    let rank = fact.rank();
    let Some(c) = fact.shape.dims().last().and_then(|d| d.known()) else { return Ok(None) };
    if rank < 2 || fact.dtype != crate::DType::F32 || g.roles.outlets().contains(&out(id)) {
        return Ok(None);
    }
    let op = FusedNormalization { kind, epsilon: 0.0, scale: false, center: false, relu: false };
    let keep = kind == Normalization::Layer;
    Ok((r.axes == op.axes(rank) && r.keep_dims == keep).then(|| (x, r.axes.clone(), c)))
}

/// `var = mean((x - mean)²)` and `root = sqrt(var + epsilon)` after the mean node `m`:
/// (centered, square, var, var + epsilon, root, epsilon).
fn variance(g: &Graph, m: NodeId, x: Outlet, axes: &[usize], keep: bool) -> Option<[NodeId; 5]> {
    let c =
        consumers(g, m).into_iter().find(|&n| matches!(g.node(n).op, Op::Sub(_)) && g.node(n).inputs == [x, out(m)])?;
    let s = consumers(g, c).into_iter().find(|&n| matches!(g.node(n).op, Op::Square(_)))?;
    let v = only(g, s, |op| is_mean(op, axes, keep))?;
    let ve = consumers(g, v).into_iter().find(|&n| {
        matches!(g.node(n).op, Op::Add(_)) && g.node(n).inputs[0] == out(v) && scalar(g, g.node(n).inputs[1]).is_some()
    })?;
    let root = only(g, ve, |op| matches!(op, Op::Sqrt(_)))?;
    Some([c, s, v, ve, root])
}

/// Training-mode batch normalization as the layer lowers it:
/// `x * inv + (beta - mean * inv)` with `inv = [gamma *] 1 / sqrt(var + epsilon)`.
fn batch_norm(g: &Graph, m: NodeId) -> Result<Option<Found>> {
    let Some((x, axes, c)) = statistics(g, m, Normalization::Batch)? else { return Ok(None) };
    let Some([centered, square, var, ve, root]) = variance(g, m, x, &axes, false) else { return Ok(None) };
    if sole_consumer(g, out(centered)) != Some(square) {
        return Ok(None);
    }
    let Some(recip) = only(g, root, |op| matches!(op, Op::Div(_))) else { return Ok(None) };
    if g.node(recip).inputs[1] != out(root) || scalar(g, g.node(recip).inputs[0]) != Some(1.0) {
        return Ok(None);
    }
    // inv: the reciprocal, or its product with gamma.
    let (inv, gamma) = match only(g, recip, |op| matches!(op, Op::Mul(_))) {
        Some(n) => match other(g, n, out(recip)) {
            Some(gm) if gm != x && gm != out(m) && per_feature(g, gm, c)? => (n, Some(gm)),
            _ => (recip, None),
        },
        None => (recip, None),
    };
    let readers = consumers(g, inv);
    if readers.len() != 2 || g.roles.outlets().contains(&out(inv)) {
        return Ok(None);
    }
    let is_mul_of = |n: NodeId, a: Outlet| matches!(g.node(n).op, Op::Mul(_)) && other(g, n, out(inv)) == Some(a);
    let (Some(&shift_mul), Some(&scaled)) =
        (readers.iter().find(|&&n| is_mul_of(n, out(m))), readers.iter().find(|&&n| is_mul_of(n, x)))
    else {
        return Ok(None);
    };
    let Some(shift) = only(g, shift_mul, |op| matches!(op, Op::Sub(_) | Op::Neg(_))) else { return Ok(None) };
    let beta = match &g.node(shift).op {
        Op::Neg(_) => None,
        _ => match g.node(shift).inputs.as_slice() {
            [b, s] if *s == out(shift_mul) && per_feature(g, *b, c)? => Some(*b),
            _ => return Ok(None),
        },
    };
    let Some(sum) = only(g, scaled, |op| matches!(op, Op::Add(_))) else { return Ok(None) };
    if other(g, sum, out(scaled)) != Some(out(shift)) || sole_consumer(g, out(shift)) != Some(sum) {
        return Ok(None);
    }
    let mut interior = vec![sum, scaled, shift, shift_mul];
    if inv != recip {
        interior.push(inv);
    }
    interior.extend([recip, root, ve, var, square, centered, m]);
    let epsilon = scalar(g, g.node(ve).inputs[1]).unwrap_or_default();
    let op = FusedNormalization {
        kind: Normalization::Batch,
        epsilon,
        scale: gamma.is_some(),
        center: beta.is_some(),
        relu: false,
    };
    Ok(Some(Found { op, x, gamma, beta, mean: m, var, out: sum, interior }))
}

/// Layer normalization as the layer lowers it:
/// `(x - mean) / sqrt(var + epsilon) [* gamma] [+ beta]`, statistics per row.
fn layer_norm(g: &Graph, m: NodeId) -> Result<Option<Found>> {
    let Some((x, axes, c)) = statistics(g, m, Normalization::Layer)? else { return Ok(None) };
    let Some([centered, square, var, ve, root]) = variance(g, m, x, &axes, true) else { return Ok(None) };
    let Some(quotient) = only(g, root, |op| matches!(op, Op::Div(_))) else { return Ok(None) };
    if g.node(quotient).inputs != [out(centered), out(root)]
        || g.outlet_consumers(out(centered)).len() != 2
        || g.roles.outlets().contains(&out(centered))
    {
        return Ok(None);
    }
    let mut y = quotient;
    let mut interior = vec![quotient];
    let mut affine = |g: &Graph, is: fn(&Op) -> bool| -> Result<Option<Outlet>> {
        let Some(n) = only(g, y, is) else { return Ok(None) };
        match other(g, n, out(y)) {
            Some(p) if per_feature(g, p, c)? => {
                y = n;
                interior.insert(0, n);
                Ok(Some(p))
            }
            _ => Ok(None),
        }
    };
    let gamma = affine(g, |op| matches!(op, Op::Mul(_)))?;
    let beta = affine(g, |op| matches!(op, Op::Add(_)))?;
    interior.extend([root, ve, var, square, centered, m]);
    let epsilon = scalar(g, g.node(ve).inputs[1]).unwrap_or_default();
    let op = FusedNormalization {
        kind: Normalization::Layer,
        epsilon,
        scale: gamma.is_some(),
        center: beta.is_some(),
        relu: false,
    };
    Ok(Some(Found { op, x, gamma, beta, mean: m, var, out: y, interior }))
}

fn rewrite(g: &mut Graph, f: Found) -> Result<()> {
    let mut inputs = vec![f.x];
    inputs.extend(f.gamma);
    inputs.extend(f.beta);
    let outputs = [out(f.out), out(f.mean), out(f.var)];
    replace_with_fused(g, f.op.into(), inputs, f.mean, f.out, &outputs, f.interior)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Initializer};

    fn ops(g: &Graph) -> Vec<&'static str> {
        g.nodes().map(|(_, n)| n.op.name()).collect()
    }

    /// `x` [N, 4, 4, 3] batch-normalized (its statistics read by a moving average, as the
    /// layer's update does) or layer-normalized.
    fn model(batch: bool, scale: bool, center: bool) -> Result<(Graph, Option<Outlet>)> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[4, 4, 3]))?;
        let gamma = scale.then(|| b.variable("gamma", &[3], Initializer::Ones, true)).transpose()?;
        let beta = center.then(|| b.variable("beta", &[3], Initializer::Zeros, true)).transpose()?;
        let (y, update) = if batch {
            let (mean, var) = b.batch_moments(x)?;
            let keep = b.scalar(0.9)?;
            let update = b.mul(mean, keep)?;
            (b.batch_normalize(x, (mean, var), gamma, beta, 1e-3)?, Some(update))
        } else {
            (b.layer_normalize(x, gamma, beta, 1e-5)?, None)
        };
        let r = b.relu(y)?;
        g.roles.loss = Some(r);
        if let Some(u) = update {
            g.roles.fetches.insert("update".into(), u);
        }
        Ok((g, update))
    }

    #[test]
    fn the_composites_become_one_op_each() -> Result<()> {
        for (batch, name) in [(true, "FusedBatchNormV3"), (false, "FusedLayerNorm")] {
            for (scale, center) in [(true, true), (false, false), (false, true), (true, false)] {
                let (mut g, update) = model(batch, scale, center)?;
                assert!(FuseNormalization.run(&mut g)?);
                crate::passes::DeadCodeElimination.run(&mut g)?;
                let ops = ops(&g);
                assert!(ops.contains(&name), "{ops:?}");
                for gone in ["Mean", "Sqrt", "Square", "Sub", "Div", "Neg"] {
                    assert!(!ops.contains(&gone), "{gone} left in {ops:?}");
                }
                let fused = g.nodes().find(|(_, n)| n.op.name() == name).map(|(id, _)| id).expect("fused");
                let Op::FusedNormalization(f) = &g.node(fused).op else { panic!("not fused") };
                assert_eq!((f.scale, f.center), (scale, center));
                assert_eq!(f.epsilon, if batch { 1e-3 } else { 1e-5 });
                if let Some(u) = update {
                    // The moving average reads the fused op's mean.
                    assert_eq!(g.node(u.node).inputs[0], Outlet::new(fused, 1));
                }
            }
        }
        Ok(())
    }

    /// A centered value that something else reads too, or the synchronized statistics
    /// (E[x²] − E[x]²), are not the composite: left alone.
    #[test]
    fn other_arithmetic_is_left_alone() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let mean = b.reduce_mean(x, &[0], false)?;
        let sq = b.square(x)?;
        let mean_sq = b.reduce_mean(sq, &[0], false)?;
        let m2 = b.square(mean)?;
        let var = b.sub(mean_sq, m2)?;
        let y = b.batch_normalize(x, (mean, var), None, None, 1e-3)?;
        let z = b.layer_normalize(y, None, None, 1e-3)?;
        // The layer norm's centered value is read outside it.
        let centered = g.nodes().filter(|(_, n)| matches!(n.op, Op::Sub(_))).map(|(id, _)| id).last();
        let mut b = GraphBuilder::new(&mut g);
        let extra = b.relu(Outlet::from(centered.unwrap_or(z.node)))?;
        let total = b.add(z, extra)?;
        g.roles.loss = Some(total);
        assert!(!FuseNormalization.run(&mut g)?, "{:?}", ops(&g));
        Ok(())
    }
}
