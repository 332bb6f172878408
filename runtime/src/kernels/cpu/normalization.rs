//! Fused batch and layer normalization over the input seen as `[rows, features]`.
//!
//! Batch normalization reads the activations twice forward (the statistics in one pass,
//! `batch_statistics`, then the output) and twice backward (two sums per feature, then the
//! input gradient), where the composite made a dozen passes and as many temporaries;
//! layer normalization works a row at a time, in cache. Sums run in fixed blocks, so the
//! result does not depend on the thread count or timing. A folded ReLU (`relu`) is applied
//! as the output is written, and its mask recomputed inside the backward's two passes.

use super::{
    batch_statistics::batch_statistics,
    buffer::{Elem, chunks, into_vec, is_whole_and_unique, min_len, sum_chunks, tensor, view, zeroed},
    norm_sums::{add_grad_sums, positive},
    reduce::sum_parts,
    simd::multiversion,
};
use crate::{
    Result, Value,
    kernels::{KernelCtx, dims},
    value::T,
};
use engine_graph::ops::{FusedNormalization, FusedNormalizationGrad, Normalization};
use rayon::prelude::*;

/// Rows summed into a block's own accumulator before it joins the running total: the
/// error of an f32 sum grows with the number of terms in one chain.
const BLOCK: usize = 256;

fn floats(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<T>> {
    inputs.into_iter().map(|v| ctx.float(v)).collect()
}

/// Splits `(x, [gamma], [beta])` or `(dy, x, [gamma], mean, var)` apart.
fn optional(it: &mut impl Iterator<Item = T>, present: bool) -> Option<T> {
    if present { it.next() } else { None }
}

fn e<E: Elem>(v: f64) -> E {
    E::from(v).unwrap_or_else(E::zero)
}

pub(super) fn forward<E: Elem>(op: &FusedNormalization, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let mut it = floats(inputs, ctx)?.into_iter();
    let x = it.next().ok_or_else(|| ctx.err("missing input"))?;
    let gamma = optional(&mut it, op.scale).map(|g| view::<E>(&g).into_owned());
    let beta = optional(&mut it, op.center).map(|b| view::<E>(&b).into_owned());
    let shape = dims(&x);
    let c = shape.last().copied().unwrap_or(0);
    if c == 0 {
        return Err(ctx.err("the input has no features"));
    }
    let (mean, var, y) = match op.kind {
        Normalization::Batch => batch_forward::<E>(x, c, op, gamma.as_deref(), beta.as_deref()),
        Normalization::Layer => layer_forward::<E>(x, c, op.epsilon, gamma.as_deref(), beta.as_deref()),
    };
    let stats = ctx.out_shape(1)?;
    Ok(vec![
        Value::Float(tensor(y, &shape, ctx.device)),
        Value::Float(tensor(mean, &stats, ctx.device)),
        Value::Float(tensor(var, &stats, ctx.device)),
    ])
}

/// Sums of `width` accumulators over `rows` rows: `f(acc, range)` adds the rows in `range`
/// (at most `BLOCK` of them) to a zeroed `acc`; the blocks' sums are added in a fixed
/// order, and so are the parts (split by the machine's CPUs, `sum_chunks`, not by the
/// pool's threads), so the result depends neither on timing nor on the thread count.
pub(super) fn blocked_sums<E: Elem>(
    rows: usize,
    width: usize,
    f: impl Fn(&mut [E], std::ops::Range<usize>) + Sync,
) -> Vec<E> {
    let per = sum_chunks(rows).div_ceil(BLOCK) * BLOCK;
    let partials: Vec<Vec<E>> = (0..rows.div_ceil(per))
        .into_par_iter()
        .with_min_len(min_len())
        .map(|part| {
            let mut total = vec![E::zero(); width];
            let mut acc = vec![E::zero(); width];
            let end = ((part + 1) * per).min(rows);
            for start in (part * per..end).step_by(BLOCK) {
                acc.iter_mut().for_each(|a| *a = E::zero());
                f(&mut acc, start..(start + BLOCK).min(end));
                total.iter_mut().zip(&acc).for_each(|(t, a)| *t += *a);
            }
            total
        })
        .collect();
    sum_parts(partials, width)
}

/// `(mean, variance, y)` with statistics per feature.
fn batch_forward<E: Elem>(
    x: T,
    c: usize,
    op: &FusedNormalization,
    gamma: Option<&[E]>,
    beta: Option<&[E]>,
) -> (Vec<E>, Vec<E>, Vec<E>) {
    let count = dims(&x).iter().product::<usize>() / c;
    let (mean, var) = batch_statistics(&view::<E>(&x)[..count * c], c, BLOCK);
    let (a, b) = output_affine(op.epsilon, gamma, beta, &mean, &var);
    let per = chunks(count) * c;
    let relu = op.relu;
    let y = if is_whole_and_unique(&x) {
        let mut y = into_vec::<E>(x);
        y.par_chunks_mut(per).for_each(|part| affine_rows(part, &a, &b, relu));
        y
    } else {
        // The backward pass reads x too: y goes to a new buffer, each part zeroed in
        // cache just before it is written, rather than copying x first.
        let xs = view::<E>(&x);
        let mut y = Vec::with_capacity(xs.len());
        y.spare_capacity_mut()[..xs.len()]
            .par_chunks_mut(per)
            .zip(xs.par_chunks(per))
            .for_each(|(out, x)| affine_into(zeroed(out), x, &a, &b, relu));
        // SAFETY: the parts cover the first `xs.len()` elements and `zeroed` initialized
        // each of them before `affine_into` wrote it.
        unsafe { y.set_len(xs.len()) };
        y
    };
    (mean, var, y)
}

/// The output's `y = x * a + b` per feature: `a = gamma / sqrt(var + eps)`, `b = beta -
/// mean * a`. The backward of a folded ReLU recomputes its mask with these, rounded alike.
fn output_affine<E: Elem>(
    eps: f32,
    gamma: Option<&[E]>,
    beta: Option<&[E]>,
    mean: &[E],
    var: &[E],
) -> (Vec<E>, Vec<E>) {
    let (gamma, beta) = affine_or_identity(mean.len(), gamma, beta);
    let a: Vec<E> = gamma.iter().zip(var).map(|(&g, &v)| g / (v + e(eps.into())).sqrt()).collect();
    let b: Vec<E> = beta.iter().zip(mean).zip(&a).map(|((&b, &m), &a)| b - m * a).collect();
    (a, b)
}

/// `x * a + b`, then a ReLU as the `Relu` kernel computes it (`max`, so NaN becomes zero).
#[inline(always)]
fn affine<E: Elem>(x: E, a: E, b: E, relu: bool) -> E {
    let y = x * a + b;
    if relu { y.max(E::zero()) } else { y }
}

multiversion! {
    /// `out = x * a + b` for each row, and its ReLU with `relu`.
    fn affine_into<E: Elem>(out: &mut [E], xs: &[E], a: &[E], b: &[E], relu: bool) {
        let c = a.len().max(1);
        for (o, x) in out.chunks_exact_mut(c).zip(xs.chunks_exact(c)) {
            for (((o, &x), &a), &b) in o.iter_mut().zip(x).zip(a).zip(b) {
                *o = affine(x, a, b, relu);
            }
        }
    }
}

multiversion! {
    /// `row = row * a + b` for each row, in place, and its ReLU with `relu`.
    fn affine_rows<E: Elem>(rows: &mut [E], a: &[E], b: &[E], relu: bool) {
        for row in rows.chunks_exact_mut(a.len().max(1)) {
            for ((v, &a), &b) in row.iter_mut().zip(a).zip(b) {
                *v = affine(*v, a, b, relu);
            }
        }
    }
}

/// `(mean, variance, y)` with statistics per row.
fn layer_forward<E: Elem>(
    x: T,
    c: usize,
    eps: f32,
    gamma: Option<&[E]>,
    beta: Option<&[E]>,
) -> (Vec<E>, Vec<E>, Vec<E>) {
    let (g, b) = affine_or_identity(c, gamma, beta);
    let mut y = into_vec::<E>(x);
    let rows = y.len() / c;
    let mut mean = vec![E::zero(); rows];
    let mut var = vec![E::zero(); rows];
    let per = chunks(rows);
    y.par_chunks_mut(per * c).zip(mean.par_chunks_mut(per)).zip(var.par_chunks_mut(per)).for_each(|((ys, ms), vs)| {
        for ((row, m), v) in ys.chunks_exact_mut(c).zip(ms).zip(vs) {
            (*m, *v) = normalize_row(row, e(eps.into()), &g, &b);
        }
    });
    (mean, var, y)
}

/// gamma and beta, or ones and zeros: the row loops then have no branch per element.
fn affine_or_identity<E: Elem>(c: usize, gamma: Option<&[E]>, beta: Option<&[E]>) -> (Vec<E>, Vec<E>) {
    (gamma.map_or_else(|| vec![E::one(); c], <[E]>::to_vec), beta.map_or_else(|| vec![E::zero(); c], <[E]>::to_vec))
}

/// `Σ f(a, b, c)` over three equal-length slices in eight independent lanes: one chain
/// would wait on the adder at every element and could not be vectorized.
#[inline(always)]
fn lane_sum<E: Elem>(a: &[E], b: &[E], c: &[E], f: impl Fn(E, E, E) -> E) -> E {
    let mut lanes = [E::zero(); 8];
    let (ca, cb, cc) = (a.chunks_exact(8), b.chunks_exact(8), c.chunks_exact(8));
    let (ra, rb, rc) = (ca.remainder(), cb.remainder(), cc.remainder());
    for ((x, y), z) in ca.zip(cb).zip(cc) {
        for (((l, &x), &y), &z) in lanes.iter_mut().zip(x).zip(y).zip(z) {
            *l += f(x, y, z);
        }
    }
    let mut total = E::zero();
    for l in lanes {
        total += l;
    }
    for ((&x, &y), &z) in ra.iter().zip(rb).zip(rc) {
        total += f(x, y, z);
    }
    total
}

multiversion! {
    /// Normalizes one row in place; returns its mean and variance.
    fn normalize_row<E: Elem>(row: &mut [E], eps: E, gamma: &[E], beta: &[E]) -> (E, E) {
        let n = E::from(row.len()).unwrap_or_else(E::one);
        let mean = lane_sum(row, row, row, |v, _, _| v) / n;
        let var = lane_sum(row, row, row, |v, _, _| (v - mean) * (v - mean)) / n;
        let rstd = E::one() / (var + eps).sqrt();
        for ((v, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
            *v = (*v - mean) * rstd * g + b;
        }
        (mean, var)
    }
}

pub(super) fn backward<E: Elem>(
    op: &FusedNormalizationGrad,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<Vec<Value>> {
    let mut it = floats(inputs, ctx)?.into_iter();
    let (Some(dy), Some(x)) = (it.next(), it.next()) else { return Err(ctx.err("missing input")) };
    let gamma = optional(&mut it, op.scale).map(|g| view::<E>(&g).into_owned());
    let (Some(mean), Some(var)) = (it.next(), it.next()) else { return Err(ctx.err("missing statistics")) };
    let (mean, var) = (view::<E>(&mean).into_owned(), view::<E>(&var).into_owned());
    let beta = optional(&mut it, op.relu && op.center).map(|b| view::<E>(&b).into_owned());
    let shape = dims(&x);
    let c = shape.last().copied().unwrap_or(0);
    if c == 0 {
        return Err(ctx.err("the input has no features"));
    }
    let eps = e::<E>(op.epsilon.into());
    let rstd: Vec<E> = var.iter().map(|&v| E::one() / (v + eps).sqrt()).collect();
    let (dx, dgamma, dbeta) = match op.kind {
        Normalization::Batch => {
            let mask = op.relu.then(|| output_affine(op.epsilon, gamma.as_deref(), beta.as_deref(), &mean, &var));
            batch_backward(dy, &x, c, gamma.as_deref(), &mean, &rstd, mask)
        }
        Normalization::Layer if op.relu => return Err(ctx.err("only batch normalization folds a ReLU")),
        Normalization::Layer => layer_backward(dy, &x, c, gamma.as_deref(), &mean, &rstd),
    };
    Ok(vec![
        Value::Float(tensor(dx, &shape, ctx.device)),
        Value::Float(tensor(dgamma, &[c], ctx.device)),
        Value::Float(tensor(dbeta, &[c], ctx.device)),
    ])
}

/// `(dx, dgamma, dbeta)` with statistics per feature:
/// `dx = gamma * rstd * (dy - dbeta / n - xhat * dgamma / n)`, `dy` zero where a folded
/// ReLU's `x * a + b` (`mask`, the forward's [`output_affine`]) was not positive.
fn batch_backward<E: Elem>(
    dy: T,
    x: &T,
    c: usize,
    gamma: Option<&[E]>,
    mean: &[E],
    rstd: &[E],
    mask: Option<(Vec<E>, Vec<E>)>,
) -> (Vec<E>, Vec<E>, Vec<E>) {
    let mask = mask.as_ref().map(|(a, b)| (&a[..], &b[..]));
    let xs = view::<E>(x);
    let n = e::<E>((xs.len() / c) as f64);
    let (dbeta, dot) = {
        let gs = view::<E>(&dy);
        // Both sums in one pass: [sum dy | sum dy * (x - mean)] side by side.
        let both = blocked_sums(xs.len() / c, 2 * c, |acc, r| {
            add_grad_sums(acc, &gs[r.start * c..r.end * c], &xs[r.start * c..r.end * c], mean, mask)
        });
        (both[..c].to_vec(), both[c..].to_vec())
    };
    let dgamma: Vec<E> = dot.iter().zip(rstd).map(|(&d, &r)| d * r).collect();
    // dx = a * dy - b * x + k, a = gamma * rstd, b = a * rstd * dgamma / n,
    // k = b * mean - a * dbeta / n.
    let (gamma, _) = affine_or_identity(c, gamma, None);
    let a: Vec<E> = (0..c).map(|j| gamma[j] * rstd[j]).collect();
    let b: Vec<E> = (0..c).map(|j| a[j] * rstd[j] * dgamma[j] / n).collect();
    let k: Vec<E> = (0..c).map(|j| b[j] * mean[j] - a[j] * dbeta[j] / n).collect();
    let mut dx = into_vec::<E>(dy);
    let per = chunks(dx.len() / c) * c;
    dx.par_chunks_mut(per).zip(xs.par_chunks(per)).for_each(|(d, x)| input_grad_rows(d, x, &a, &b, &k, mask));
    (dx, dgamma, dbeta)
}

multiversion! {
    /// `d = a * d - b * x + k` for each row, in place; with `mask` (the forward's affine),
    /// `d` counts as zero where `x * a + b` was not positive.
    fn input_grad_rows<E: Elem>(ds: &mut [E], xs: &[E], a: &[E], b: &[E], k: &[E], mask: Option<(&[E], &[E])>) {
        let c = a.len().max(1);
        match mask {
            None => {
                for (d, x) in ds.chunks_exact_mut(c).zip(xs.chunks_exact(c)) {
                    for ((((d, &x), &a), &b), &k) in d.iter_mut().zip(x).zip(a).zip(b).zip(k) {
                        *d = a * *d - b * x + k;
                    }
                }
            }
            Some((fa, fb)) => {
                // Every slice cut to `c` and every value loaded before the select, so the
                // loop is a vector loop with a blend, not a branch per element.
                let (a, b, k, fa, fb) = (&a[..c], &b[..c], &k[..c], &fa[..c], &fb[..c]);
                for (d, x) in ds.chunks_exact_mut(c).zip(xs.chunks_exact(c)) {
                    let (d, x) = (&mut d[..c], &x[..c]);
                    for j in 0..c {
                        let (dv, xv) = (d[j], x[j]);
                        let g = if positive(xv, fa[j], fb[j]) { dv } else { E::zero() };
                        d[j] = a[j] * g - b[j] * xv + k[j];
                    }
                }
            }
        }
    }
}

/// `(dx, dgamma, dbeta)` with statistics per row: with `xhat = (x - mean) * rstd` and
/// `h = dy * gamma`, `dx = rstd * (h - mean(h) - xhat * mean(h * xhat))` along each row.
fn layer_backward<E: Elem>(
    dy: T,
    x: &T,
    c: usize,
    gamma: Option<&[E]>,
    mean: &[E],
    rstd: &[E],
) -> (Vec<E>, Vec<E>, Vec<E>) {
    let (g, _) = affine_or_identity(c, gamma, None);
    let xs = view::<E>(x);
    let mut dx = into_vec::<E>(dy);
    let rows = xs.len() / c;
    let per = sum_chunks(rows);
    let partials: Vec<Vec<E>> = dx
        .par_chunks_mut(per * c)
        .zip(xs.par_chunks(per * c))
        .zip(mean.par_chunks(per).zip(rstd.par_chunks(per)))
        .with_min_len(min_len())
        .map(|((ds, xs), (ms, rs))| {
            // [dgamma | dbeta] partial sums of this part's rows.
            let mut acc = vec![E::zero(); 2 * c];
            for (((d, x), &m), &r) in ds.chunks_exact_mut(c).zip(xs.chunks_exact(c)).zip(ms).zip(rs) {
                layer_grad_row(d, x, m, r, &g, &mut acc);
            }
            acc
        })
        .collect();
    let mut total = sum_parts(partials, 2 * c);
    let dbeta = total.split_off(c);
    (dx, total, dbeta)
}

multiversion! {
    /// One row's input gradient, in place over its `dy`, adding to `[dgamma | dbeta]`.
    fn layer_grad_row<E: Elem>(d: &mut [E], x: &[E], mean: E, rstd: E, gamma: &[E], acc: &mut [E]) {
        let c = d.len();
        let n = E::from(c).unwrap_or_else(E::one);
        let (dgamma, dbeta) = acc.split_at_mut(c);
        for (((dg, db), &dy), &x) in dgamma.iter_mut().zip(dbeta.iter_mut()).zip(d.iter()).zip(x) {
            *dg += dy * (x - mean) * rstd;
            *db += dy;
        }
        let mh = lane_sum(d, gamma, x, |dy, g, _| dy * g) / n;
        let mhx = lane_sum(d, gamma, x, |dy, g, x| dy * g * (x - mean) * rstd) / n;
        for ((dy, &g), &x) in d.iter_mut().zip(gamma).zip(x) {
            let xhat = (x - mean) * rstd;
            *dy = rstd * (*dy * g - mh - xhat * mhx);
        }
    }
}
