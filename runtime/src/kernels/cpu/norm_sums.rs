//! Batch normalization's per-feature sums over a block of rows: the squared deviations
//! forward, `Σ dy` and `Σ dy (x - mean)` backward (`dy` masked by a folded ReLU).
//!
//! Summed through `acc` in memory, each row's additions waited on the stores of the row
//! before (the width is known only at run time, so the compiler cannot keep the sums in
//! registers); that chain, not the reading, was the cost. So widths that are multiples
//! of 16 go by strips of columns whose sums stay in registers for the whole block. Each
//! column still adds its rows in row order, so the sums are bit for bit the loop's.

use super::{buffer::Elem, simd::multiversion};

multiversion! {
    /// `acc += (row - mean)²` for each row.
    pub(super) fn add_squared_deviations<E: Elem>(acc: &mut [E], rows: &[E], mean: &[E]) {
        let c = acc.len().max(1);
        // Loops, not `step_by(..).for_each`: a closure is compiled apart from this
        // function, without its AVX2.
        match c {
            c if c % 32 == 0 => {
                for s in 0..c / 32 {
                    deviations_strip::<E, 32>(acc, rows, mean, 32 * s);
                }
            }
            c if c % 16 == 0 => {
                for s in 0..c / 16 {
                    deviations_strip::<E, 16>(acc, rows, mean, 16 * s);
                }
            }
            _ => {
                for row in rows.chunks_exact(c) {
                    for ((a, v), m) in acc.iter_mut().zip(row).zip(mean) {
                        let d = *v - *m;
                        *a += d * d;
                    }
                }
            }
        }
    }
}

/// [`add_squared_deviations`] for columns `s..s + N`.
#[inline(always)]
fn deviations_strip<E: Elem, const N: usize>(acc: &mut [E], rows: &[E], mean: &[E], s: usize) {
    let c = acc.len();
    let mut sums = [E::zero(); N];
    sums.copy_from_slice(&acc[s..s + N]);
    let mut m = [E::zero(); N];
    m.copy_from_slice(&mean[s..s + N]);
    for row in rows.chunks_exact(c) {
        for ((a, v), m) in sums.iter_mut().zip(&row[s..s + N]).zip(&m) {
            let d = *v - *m;
            *a += d * d;
        }
    }
    acc[s..s + N].copy_from_slice(&sums);
}

/// `x * a + b > 0`: a folded ReLU's mask, recomputed from the forward's own `a` and `b`
/// (rounded as the forward rounded them), so it agrees with the output bit for bit.
#[inline(always)]
pub(super) fn positive<E: Elem>(x: E, a: E, b: E) -> bool {
    x * a + b > E::zero()
}

multiversion! {
    /// `acc[..c] += dy`, `acc[c..] += dy * (x - mean)` for each row; with `mask`, the
    /// forward's `(a, b)`, `dy` counts only where `x * a + b > 0` (a folded ReLU).
    pub(super) fn add_grad_sums<E: Elem>(acc: &mut [E], gs: &[E], xs: &[E], mean: &[E], mask: Option<(&[E], &[E])>) {
        let c = mean.len().max(1);
        match (c % 32, c % 16, mask) {
            (0, _, None) => grad_sums_strips::<E, 32, false>(acc, gs, xs, mean, mean, mean),
            (0, _, Some((a, b))) => grad_sums_strips::<E, 32, true>(acc, gs, xs, mean, a, b),
            (_, 0, None) => grad_sums_strips::<E, 16, false>(acc, gs, xs, mean, mean, mean),
            (_, 0, Some((a, b))) => grad_sums_strips::<E, 16, true>(acc, gs, xs, mean, a, b),
            _ => {
                let (a, b) = mask.unwrap_or((mean, mean));
                let (sum, dot) = acc.split_at_mut(c);
                for (g, x) in gs.chunks_exact(c).zip(xs.chunks_exact(c)) {
                    for j in 0..c {
                        let g = if mask.is_none() || positive(x[j], a[j], b[j]) { g[j] } else { E::zero() };
                        sum[j] += g;
                        dot[j] += g * (x[j] - mean[j]);
                    }
                }
            }
        }
    }
}

/// [`add_grad_sums`] for every strip of `N` columns, masked by `x * a + b > 0` when
/// `MASK` (`c` a multiple of `N`).
#[inline(always)]
fn grad_sums_strips<E: Elem, const N: usize, const MASK: bool>(
    acc: &mut [E],
    gs: &[E],
    xs: &[E],
    mean: &[E],
    a: &[E],
    b: &[E],
) {
    for s in (0..mean.len() / N).map(|i| N * i) {
        grad_sums_strip::<E, N, MASK>(acc, gs, xs, mean, a, b, s);
    }
}

/// [`add_grad_sums`] for columns `s..s + N`, masked by `x * a + b > 0` when `MASK`.
#[inline(always)]
fn grad_sums_strip<E: Elem, const N: usize, const MASK: bool>(
    acc: &mut [E],
    gs: &[E],
    xs: &[E],
    mean: &[E],
    a: &[E],
    b: &[E],
    s: usize,
) {
    let c = mean.len();
    let mut sum = [E::zero(); N];
    sum.copy_from_slice(&acc[s..s + N]);
    let mut dot = [E::zero(); N];
    dot.copy_from_slice(&acc[c + s..c + s + N]);
    let mut m = [E::zero(); N];
    m.copy_from_slice(&mean[s..s + N]);
    let (a, b) = (&a[s..s + N], &b[s..s + N]);
    for (g, x) in gs.chunks_exact(c).zip(xs.chunks_exact(c)) {
        let (g, x) = (&g[s..s + N], &x[s..s + N]);
        for i in 0..N {
            // Loaded before the select: a load under the condition becomes a masked load.
            let g = g[i];
            let g = if !MASK || positive(x[i], a[i], b[i]) { g } else { E::zero() };
            sum[i] += g;
            dot[i] += g * (x[i] - m[i]);
        }
    }
    acc[s..s + N].copy_from_slice(&sum);
    acc[c + s..c + s + N].copy_from_slice(&dot);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<E: Elem>(n: usize, seed: usize) -> Vec<E> {
        (0..n).map(|i| E::from((((i + seed) * 7919) % 101) as f64 * 0.013 - 0.6).unwrap_or(E::zero())).collect()
    }

    fn bytes<E: Elem>(v: &[E]) -> Vec<u8> {
        bytemuck::cast_slice::<E, u8>(v).to_vec()
    }

    /// Every width, the strip-wise ones among them, adds each column's rows in row order:
    /// bit for bit the plain loops, in f32 and f64, with a NaN and an infinity in the rows.
    #[test]
    fn strips_add_in_row_order_at_every_width() {
        fn check<E: Elem>(c: usize) {
            let rows = 37;
            let mut xs = values::<E>(rows * c, 3);
            let gs = values::<E>(rows * c, 11);
            if c > 2 {
                xs[c + 1] = E::nan();
                xs[3 * c + 2] = E::infinity();
            }
            let mean = values::<E>(c, 5);
            let start = values::<E>(2 * c, 7);

            let mut want = start[..c].to_vec();
            for row in xs.chunks_exact(c) {
                for ((a, v), m) in want.iter_mut().zip(row).zip(&mean) {
                    *a += (*v - *m) * (*v - *m);
                }
            }
            let mut got = start[..c].to_vec();
            add_squared_deviations(&mut got, &xs, &mean);
            assert_eq!(bytes(&got), bytes(&want), "squared deviations, width {c}");

            // Unmasked, and masked by a ReLU that some of each column's rows pass.
            let (a, b) = (values::<E>(c, 13), values::<E>(c, 17));
            for masked in [false, true] {
                let mut want = start.clone();
                for (g, x) in gs.chunks_exact(c).zip(xs.chunks_exact(c)) {
                    for j in 0..c {
                        let g = if !masked || x[j] * a[j] + b[j] > E::zero() { g[j] } else { E::zero() };
                        want[c + j] += g * (x[j] - mean[j]);
                        want[j] += g;
                    }
                }
                let mut got = start.clone();
                add_grad_sums(&mut got, &gs, &xs, &mean, masked.then_some((&a[..], &b[..])));
                assert_eq!(bytes(&got), bytes(&want), "gradient sums, width {c}, masked {masked}");
            }
        }
        for c in [1, 3, 10, 16, 17, 32, 48, 64, 96, 128, 130] {
            check::<f32>(c);
            check::<f64>(c);
        }
    }
}
