//! The composite that `MultiHeadAttention` lowers to becomes one [`FusedAttention`], before
//! autodiff, so that the backward pass is one
//! [`FusedAttentionGrad`](crate::ops::FusedAttentionGrad) too.
//!
//! The layer keeps lowering to primitives (the projections split into head-major copies,
//! a scaled batched product, a softmax, a dropout, a second product merged back), which
//! every backend and strategy understands, and a model written by hand with the same
//! arithmetic is recognized as well. What is matched is that arithmetic: each head split
//! is `Reshape [N, T, H, D]`, `Transpose [0, 2, 1, 3]`, `Reshape [N*H, T, D]`, the merge its
//! inverse, and every interior value is read by the next step only.

use super::{Pass, fuse_bias_activation::sole_consumer, fuse_normalization::scalar, replace::replace_with_fused};
use crate::{
    Dim, Graph, NodeId, Op, Outlet, Result,
    ops::{FusedAttention, OpDef},
};

#[derive(Debug, Default)]
pub struct FuseAttention;

impl Pass for FuseAttention {
    fn name(&self) -> &str {
        "fuse-attention"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if !g.contains(id) || !matches!(g.node(id).op, Op::Softmax(_)) {
                continue;
            }
            if let Some(found) = attention(g, id)? {
                rewrite(g, found)?;
                changed = true;
            }
        }
        Ok(changed)
    }
}

/// A matched composite: the fused op, the projections it reads, its output node and its
/// interior in an order in which each node's consumers go before it.
struct Found {
    op: FusedAttention,
    inputs: [Outlet; 3],
    out: NodeId,
    softmax: NodeId,
    interior: Vec<NodeId>,
}

fn out(id: NodeId) -> Outlet {
    Outlet::from(id)
}

/// The sole consumer of output 0 of `id` when it matches `is`.
fn only(g: &Graph, id: NodeId, is: impl Fn(&Op) -> bool) -> Option<NodeId> {
    sole_consumer(g, out(id)).filter(|&c| is(&g.node(c).op))
}

fn is_reshape(op: &Op) -> bool {
    matches!(op, Op::Reshape(_))
}

fn is_head_transpose(op: &Op) -> bool {
    matches!(op, Op::Transpose(t) if t.perm == [0, 2, 1, 3])
}

/// A head split ending at `o` (`Reshape [N*H, T, D]` of `Transpose [0, 2, 1, 3]` of
/// `Reshape [N, T, H, D]` of `x [N, T, H*D]`): `(x, H, [nodes])`, outermost first.
fn split(g: &Graph, o: Outlet) -> Result<Option<(Outlet, usize, [NodeId; 3])>> {
    let merged = o.node;
    if o.output != 0 || !is_reshape(&g.node(merged).op) {
        return Ok(None);
    }
    let transposed = g.node(merged).inputs[0];
    if !is_head_transpose(&g.node(transposed.node).op) || sole_consumer(g, transposed) != Some(merged) {
        return Ok(None);
    }
    let split = g.node(transposed.node).inputs[0];
    if !is_reshape(&g.node(split.node).op) || sole_consumer(g, split) != Some(transposed.node) {
        return Ok(None);
    }
    let x = g.node(split.node).inputs[0];
    // [N, T, H*D] seen as [N, T, H, D]: the same rows, each cut into heads.
    let heads = match (g.fact(x)?.shape.dims(), g.fact(split)?.shape.dims()) {
        ([n, t, Dim::Known(hd)], [n2, t2, Dim::Known(h), Dim::Known(d)]) if n == n2 && t == t2 && h * d == *hd => *h,
        _ => return Ok(None),
    };
    Ok(Some((x, heads, [merged, transposed.node, split.node])))
}

/// The merge after `product` (`Reshape [N, H, T, D]`, `Transpose [0, 2, 1, 3]`, `Reshape
/// [N, T, H*D]`) of `heads` heads: its nodes, the last one first.
fn merge(g: &Graph, product: NodeId, heads: usize) -> Result<Option<[NodeId; 3]>> {
    let Some(split) = only(g, product, is_reshape) else { return Ok(None) };
    let Some(transposed) = only(g, split, is_head_transpose) else { return Ok(None) };
    let Some(merged) = only(g, transposed, is_reshape) else { return Ok(None) };
    // [N*H, T, D] seen as [N, H, T, D]: head-major, as the products made it.
    let fits = match (g.fact(out(product))?.shape.dims(), g.fact(out(split))?.shape.dims()) {
        ([_, t, d], [_, Dim::Known(h), t2, d2]) => *h == heads && t == t2 && d == d2,
        _ => false,
    };
    Ok(fits.then_some([merged, transposed, split]))
}

fn attention(g: &Graph, softmax: NodeId) -> Result<Option<Found>> {
    let scores = g.node(softmax).inputs[0];
    let Op::Softmax(s) = &g.node(softmax).op else { return Ok(None) };
    if g.fact(scores)?.rank() != 3 || s.axis != 2 || sole_consumer(g, scores) != Some(softmax) {
        return Ok(None);
    }
    let product = scores.node;
    let (qs, kh) = match (&g.node(product).op, g.node(product).inputs.as_slice()) {
        (Op::MatMul(m), [a, b]) if !m.transpose_a && m.transpose_b && scores.output == 0 => (*a, *b),
        _ => return Ok(None),
    };
    // The queries' scale: a product with a scalar constant read by the scores only.
    let (qh, scale) = match (&g.node(qs.node).op, g.node(qs.node).inputs.as_slice()) {
        (Op::Mul(_), [a, b]) if sole_consumer(g, qs) == Some(product) => match (scalar(g, *a), scalar(g, *b)) {
            (_, Some(c)) => (*a, c),
            (Some(c), _) => (*b, c),
            _ => (qs, 1.0),
        },
        _ => (qs, 1.0),
    };
    // The weights, through an optional dropout, to the second product.
    let Some(next) = sole_consumer(g, out(softmax)) else { return Ok(None) };
    let (dropout, weighted) = match &g.node(next).op {
        Op::Dropout(d) => {
            let mask_read = !g.outlet_consumers(Outlet::new(next, 1)).is_empty()
                || g.roles.outlets().contains(&Outlet::new(next, 1));
            match sole_consumer(g, out(next)) {
                Some(w) if !mask_read => (Some((next, d.clone())), w),
                _ => return Ok(None),
            }
        }
        _ => (None, next),
    };
    let (dropout, rate_and_seed) = dropout.unzip();
    let weights = dropout.map_or(out(softmax), out);
    let vh = match (&g.node(weighted).op, g.node(weighted).inputs.as_slice()) {
        (Op::MatMul(m), [w, v]) if !m.transpose_a && !m.transpose_b && *w == weights => *v,
        _ => return Ok(None),
    };
    let (Some((q, hq, qn)), Some((k, hk, kn)), Some((v, hv, vn))) = (split(g, qh)?, split(g, kh)?, split(g, vh)?)
    else {
        return Ok(None);
    };
    let Some(merged) = merge(g, weighted, hq)? else { return Ok(None) };
    if sole_consumer(g, qh) != Some(if qh == qs { product } else { qs.node })
        || sole_consumer(g, kh) != Some(product)
        || sole_consumer(g, vh) != Some(weighted)
        || hq != hk
        || hk != hv
    {
        return Ok(None);
    }
    let op = FusedAttention { heads: hq, scale, dropout: rate_and_seed };
    // The fused op must compute exactly the composite's shapes, or it is not this pattern.
    let Ok(facts) = op.infer(&[g.fact(q)?.clone(), g.fact(k)?.clone(), g.fact(v)?.clone()]) else {
        return Ok(None);
    };
    if &facts[0] != g.fact(out(merged[0]))? || &facts[1] != g.fact(out(softmax))? {
        return Ok(None);
    }
    // Each node before its inputs: the merge, the products, the splits last.
    let mut interior: Vec<NodeId> = merged.into_iter().chain([weighted]).collect();
    interior.extend(dropout);
    interior.extend([softmax, product]);
    if qh != qs {
        interior.push(qs.node);
    }
    interior.extend(qn.into_iter().chain(kn).chain(vn));
    Ok(Some(Found { op, inputs: [q, k, v], out: merged[0], softmax, interior }))
}

fn rewrite(g: &mut Graph, f: Found) -> Result<()> {
    replace_with_fused(g, f.op.into(), f.inputs.to_vec(), f.softmax, f.out, &[out(f.out)], f.interior)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Shape, layers::MultiHeadAttention, passes::DeadCodeElimination};

    fn ops(g: &Graph) -> Vec<&'static str> {
        g.nodes().map(|(_, n)| n.op.name()).collect()
    }

    /// Keras' layer over `[N, 5, 6]`, in training (with its dropout) or not.
    fn model(training: bool, dropout: f32) -> Result<(Graph, Outlet)> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[5, 6]))?;
        let layer = MultiHeadAttention { dropout, value_dim: Some(3), ..MultiHeadAttention::new(2, 4) };
        let y = layer.apply(&mut b, x, None, None, training, 7)?;
        g.roles.loss = Some(y);
        Ok((g, y))
    }

    #[test]
    fn the_composite_becomes_one_op() -> Result<()> {
        for (training, dropout) in [(true, 0.25), (false, 0.25), (true, 0.0)] {
            let (mut g, y) = model(training, dropout)?;
            let before = g.fact(y)?.clone();
            assert!(FuseAttention.run(&mut g)?);
            DeadCodeElimination.run(&mut g)?;
            g.check()?;
            let ops = ops(&g);
            assert_eq!(ops.iter().filter(|&&o| o == "FusedAttention").count(), 1, "{ops:?}");
            for gone in ["Softmax", "Transpose", "Dropout"] {
                assert!(!ops.contains(&gone), "{gone} left in {ops:?}");
            }
            // Only the projections' and the output's matrix products are left.
            assert_eq!(ops.iter().filter(|&&o| o == "MatMul").count(), 4, "{ops:?}");
            let (_, fused) = g.nodes().find(|(_, n)| n.op.name() == "FusedAttention").expect("fused");
            let Op::FusedAttention(f) = &fused.op else { panic!("not the fused op") };
            assert_eq!(f.heads, 2);
            assert!((f.scale - 0.5).abs() < 1e-7, "1/sqrt(key_dim 4), found {}", f.scale);
            assert_eq!(f.dropout.as_ref().map(|d| d.rate), (training && dropout > 0.0).then_some(0.25));
            assert!(fused.name.ends_with("multi_head_attention/FusedAttention"), "{}", fused.name);
            let loss = g.roles.loss.expect("the loss");
            assert_eq!(&before, g.fact(loss)?);
        }
        Ok(())
    }

    /// Weights read elsewhere (as Keras' `return_attention_scores` does), or a dropout
    /// mask read by another node, are not the composite: left alone.
    #[test]
    fn weights_read_elsewhere_are_left_alone() -> Result<()> {
        for (training, what) in [(false, "Softmax"), (true, "Dropout")] {
            let (mut g, y) = model(training, 0.5)?;
            let (read, _) = g.nodes().find(|(_, n)| n.op.name() == what).expect("node");
            let output = usize::from(what == "Dropout");
            let mut b = GraphBuilder::new(&mut g);
            let extra = b.reduce_sum(Outlet::new(read, output), &[0, 1, 2], false)?;
            let total = b.add(extra, y)?;
            g.roles.loss = Some(total);
            assert!(!FuseAttention.run(&mut g)?, "{:?}", ops(&g));
        }
        Ok(())
    }
}
