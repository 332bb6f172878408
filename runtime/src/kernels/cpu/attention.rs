//! Fused attention on the CPU, one example per task: each head's scores stay in a small
//! buffer in cache, the projections are read in place (head `h` is a column block of the
//! `[T, H*D]` rows, a strided matrix to `gemm`), and the dropout's mask is recomputed from
//! its hash instead of stored. The composite wrote the scores, the weights, the mask and
//! head-major copies of q, k, v and of the result through memory, forward and backward.
//!
//! The arithmetic is the composite's, in its order: the queries scaled first, then the
//! product with the keys, the softmax of `softmax::softmax_row`, the dropout's mask.

use super::{
    buffer::{Elem, min_len, tensor, view},
    gemm::{Mat, gemm},
    simd::multiversion,
    softmax::softmax_row,
};
use crate::{
    Result, Value,
    kernels::{
        self, KernelCtx, dims,
        dropout::{Stream, kept, scale},
    },
};
use engine_graph::ops::{Dropout, FusedAttention, FusedAttentionGrad};
use rayon::prelude::*;

/// The sizes of one call: examples, heads, tokens, per-head features.
#[derive(Clone, Copy)]
struct Sizes {
    n: usize,
    h: usize,
    tq: usize,
    tk: usize,
    dk: usize,
    dv: usize,
}

impl Sizes {
    fn of(heads: usize, q: &[usize], k: &[usize], v: &[usize], ctx: &KernelCtx<'_>) -> Result<Sizes> {
        let (n, d) = kernels::attention::sizes(heads, q, k, v, ctx)?;
        Ok(Sizes { n, h: d.heads, tq: d.tq, tk: d.tk, dk: d.dk, dv: d.dv })
    }

    /// One head's `t x d` block in an example's `[t, H*d]` rows (`data` starts at the
    /// example).
    fn head<'a, E>(data: &'a [E], head: usize, d: usize, heads: usize) -> Mat<'a, E> {
        Mat { data: &data[head * d..], rs: heads * d, cs: 1 }
    }

    /// The same block transposed (`d x t`).
    fn head_t<'a, E>(data: &'a [E], head: usize, d: usize, heads: usize) -> Mat<'a, E> {
        Mat { data: &data[head * d..], rs: 1, cs: heads * d }
    }

    fn weights(&self) -> usize {
        self.tq * self.tk
    }
}

/// The dropout's mask for one head's weights (`None`: no dropout): the scale where kept,
/// zero where dropped, units numbered as in the whole `[N*H, Tq, Tk]` tensor.
struct Mask<E> {
    lanes: (u32, u32, Option<u32>),
    scale: E,
}

impl<E: Elem> Mask<E> {
    fn new(d: Option<&Dropout>, s: Sizes, ctx: &KernelCtx<'_>) -> Result<Option<Mask<E>>> {
        let Some(d) = d else { return Ok(None) };
        let total = s.n * s.h * s.weights();
        Ok(Some(Mask { lanes: Stream::lanes(d, total, ctx), scale: scale::<E>(d, ctx)? }))
    }

    /// The stream's lanes with unit `first` as unit 0.
    fn starting_at(&self, first: usize) -> (u32, u32, Option<u32>) {
        let (offset, seed, threshold) = self.lanes;
        (offset.wrapping_add(first as u32), seed, threshold)
    }

    /// `out = x * mask` for the head whose weights start at unit `first`.
    fn apply(&self, first: usize, x: &[E], out: &mut [E]) {
        masked(self.starting_at(first), self.scale, x, out);
    }

    /// `x *= mask`, in place.
    fn apply_in_place(&self, first: usize, x: &mut [E]) {
        masked_in_place(self.starting_at(first), self.scale, x);
    }
}

multiversion! {
    /// `out = x * mask` over a head's units, vectorized as the `Dropout` kernel's mask is.
    fn masked<E: Elem>(lanes: (u32, u32, Option<u32>), scale: E, x: &[E], out: &mut [E]) {
        for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
            *o = v * if kept(i as u32, lanes) { scale } else { E::zero() };
        }
    }
}

multiversion! {
    fn masked_in_place<E: Elem>(lanes: (u32, u32, Option<u32>), scale: E, x: &mut [E]) {
        for (i, v) in x.iter_mut().enumerate() {
            *v = *v * if kept(i as u32, lanes) { scale } else { E::zero() };
        }
    }
}

/// Writes a `t x d` block into head `head`'s columns of `[t, H*d]` rows.
fn scatter<E: Copy>(block: &[E], rows: &mut [E], head: usize, d: usize, heads: usize) {
    for (src, dst) in block.chunks_exact(d).zip(rows.chunks_exact_mut(heads * d)) {
        dst[head * d..(head + 1) * d].copy_from_slice(src);
    }
}

/// `q * scale` for one head, gathered into a contiguous `t x d` block.
fn scaled_head<E: Elem>(x: &[E], head: usize, s: &Sizes, t: usize, scale: E, out: &mut [E]) {
    for (row, o) in x.chunks_exact(s.h * s.dk).zip(out.chunks_exact_mut(s.dk)).take(t) {
        o.iter_mut().zip(&row[head * s.dk..(head + 1) * s.dk]).for_each(|(o, &v)| *o = v * scale);
    }
}

fn shape_error(ctx: &KernelCtx<'_>) -> crate::RuntimeError {
    ctx.err("a head's block does not fit its buffer")
}

pub(super) fn forward<E: Elem>(op: &FusedAttention, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [q, k, v] = ctx.floats(inputs)?;
    let s = Sizes::of(op.heads, &dims(&q), &dims(&k), &dims(&v), ctx)?;
    let (qs, ks, vs) = (view::<E>(&q), view::<E>(&k), view::<E>(&v));
    let scale = <E as num_traits::NumCast>::from(op.scale).ok_or_else(|| ctx.err("scale out of range"))?;
    let mask = Mask::<E>::new(op.dropout.as_ref(), s, ctx)?;
    let mut out = vec![E::zero(); s.n * s.tq * s.h * s.dv];
    let mut weights = vec![E::zero(); s.n * s.h * s.weights()];
    let fits = out
        .par_chunks_mut(s.tq * s.h * s.dv)
        .zip(weights.par_chunks_mut(s.h * s.weights()))
        .enumerate()
        .with_min_len(min_len())
        .map(|(i, (out, weights))| {
            let q = &qs[i * s.tq * s.h * s.dk..];
            let (k, v) = (&ks[i * s.tk * s.h * s.dk..], &vs[i * s.tk * s.h * s.dv..]);
            let mut qh = vec![E::zero(); s.tq * s.dk];
            let mut scores = vec![E::zero(); s.weights()];
            let mut dropped = vec![E::zero(); if mask.is_some() { s.weights() } else { 0 }];
            let mut head_out = vec![E::zero(); s.tq * s.dv];
            (0..s.h).all(|h| {
                let p = &mut weights[h * s.weights()..(h + 1) * s.weights()];
                scaled_head(q, h, &s, s.tq, scale, &mut qh);
                let kt = Sizes::head_t(k, h, s.dk, s.h);
                if !gemm(s.tq, s.tk, s.dk, &mut scores, false, Mat::row_major(&qh, s.dk), kt, 1) {
                    return false;
                }
                for (row, o) in scores.chunks_exact(s.tk).zip(p.chunks_exact_mut(s.tk)) {
                    softmax_row(row, o);
                }
                let w: &[E] = match &mask {
                    Some(m) => {
                        m.apply((i * s.h + h) * s.weights(), p, &mut dropped);
                        &dropped
                    }
                    None => &*p,
                };
                let vh = Sizes::head(v, h, s.dv, s.h);
                if !gemm(s.tq, s.dv, s.tk, &mut head_out, false, Mat::row_major(w, s.tk), vh, 1) {
                    return false;
                }
                scatter(&head_out, out, h, s.dv, s.h);
                true
            })
        })
        .all(|ok| ok);
    if !fits {
        return Err(shape_error(ctx));
    }
    let (out_shape, weights_shape) = ([s.n, s.tq, s.h * s.dv], [s.n * s.h, s.tq, s.tk]);
    Ok(vec![
        Value::Float(tensor(out, &out_shape, ctx.device)),
        Value::Float(tensor(weights, &weights_shape, ctx.device)),
    ])
}

pub(super) fn backward<E: Elem>(
    op: &FusedAttentionGrad,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<Vec<Value>> {
    let [dy, q, k, v, w] = ctx.floats(inputs)?;
    let s = Sizes::of(op.heads, &dims(&q), &dims(&k), &dims(&v), ctx)?;
    let (dys, qs, ks, vs, ws) = (view::<E>(&dy), view::<E>(&q), view::<E>(&k), view::<E>(&v), view::<E>(&w));
    if dys.len() != s.n * s.tq * s.h * s.dv || ws.len() != s.n * s.h * s.weights() {
        return Err(ctx.err("the gradient or the weights do not match the attention's sizes"));
    }
    let scale = <E as num_traits::NumCast>::from(op.scale).ok_or_else(|| ctx.err("scale out of range"))?;
    let mask = Mask::<E>::new(op.dropout.as_ref(), s, ctx)?;
    let mut dq = vec![E::zero(); qs.len()];
    let mut dk = vec![E::zero(); ks.len()];
    let mut dv = vec![E::zero(); vs.len()];
    let fits = dq
        .par_chunks_mut(s.tq * s.h * s.dk)
        .zip(dk.par_chunks_mut(s.tk * s.h * s.dk))
        .zip(dv.par_chunks_mut(s.tk * s.h * s.dv))
        .enumerate()
        .with_min_len(min_len())
        .map(|(i, ((dq, dk), dv))| {
            let (q, k) = (&qs[i * s.tq * s.h * s.dk..], &ks[i * s.tk * s.h * s.dk..]);
            let (v, dy) = (&vs[i * s.tk * s.h * s.dv..], &dys[i * s.tq * s.h * s.dv..]);
            let mut qh = vec![E::zero(); s.tq * s.dk];
            let mut dropped = vec![E::zero(); if mask.is_some() { s.weights() } else { 0 }];
            let mut dw = vec![E::zero(); s.weights()];
            let mut block = vec![E::zero(); s.tq.max(s.tk) * s.dk.max(s.dv)];
            (0..s.h).all(|h| {
                let first = (i * s.h + h) * s.weights();
                let p = &ws[first..first + s.weights()];
                let pm: &[E] = match &mask {
                    Some(m) => {
                        m.apply(first, p, &mut dropped);
                        &dropped
                    }
                    None => p,
                };
                let dyh = Sizes::head(dy, h, s.dv, s.h);
                // dV = (P∘M)^T dy.
                let dvh = &mut block[..s.tk * s.dv];
                if !gemm(s.tk, s.dv, s.tq, dvh, false, Mat::transposed(pm, s.tk), dyh, 1) {
                    return false;
                }
                scatter(dvh, dv, h, s.dv, s.h);
                // dP = (dy V^T)∘M, then the softmax's backward: dS = P∘(dP − Σ dP∘P).
                if !gemm(s.tq, s.tk, s.dv, &mut dw, false, dyh, Sizes::head_t(v, h, s.dv, s.h), 1) {
                    return false;
                }
                if let Some(m) = &mask {
                    m.apply_in_place(first, &mut dw);
                }
                for (d, p) in dw.chunks_exact_mut(s.tk).zip(p.chunks_exact(s.tk)) {
                    let dot: E = d.iter().zip(p).map(|(&d, &p)| d * p).sum();
                    d.iter_mut().zip(p).for_each(|(d, &p)| *d = p * (*d - dot));
                }
                // dQ = scale · dS K, dK = dS^T (scale · Q).
                let dqh = &mut block[..s.tq * s.dk];
                if !gemm(s.tq, s.dk, s.tk, dqh, false, Mat::row_major(&dw, s.tk), Sizes::head(k, h, s.dk, s.h), 1) {
                    return false;
                }
                dqh.iter_mut().for_each(|x| *x = *x * scale);
                scatter(dqh, dq, h, s.dk, s.h);
                scaled_head(q, h, &s, s.tq, scale, &mut qh);
                let dkh = &mut block[..s.tk * s.dk];
                if !gemm(s.tk, s.dk, s.tq, dkh, false, Mat::transposed(&dw, s.tk), Mat::row_major(&qh, s.dk), 1) {
                    return false;
                }
                scatter(dkh, dk, h, s.dk, s.h);
                true
            })
        })
        .all(|ok| ok);
    if !fits {
        return Err(shape_error(ctx));
    }
    let (qd, kd, vd) = (dims(&q), dims(&k), dims(&v));
    Ok(vec![
        Value::Float(tensor(dq, &qd, ctx.device)),
        Value::Float(tensor(dk, &kd, ctx.device)),
        Value::Float(tensor(dv, &vd, ctx.device)),
    ])
}
