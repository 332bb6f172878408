//! Batch normalization's mean and variance per feature in one pass over memory.
//!
//! The variance about the batch's mean needs the mean first, so computed directly it reads
//! the activations twice, and a ResNet's stem output (12.8 MB) does not stay in any cache
//! between the two passes: on an Intel Xeon, whose core reads beyond L2 at a quarter of
//! its L2 rate, the stem's normalization took 5.4 ms of an 88 ms step. Here each block of
//! rows, small enough to stay in L1 or L2, is read from memory once: its sums, then its
//! squared deviations about its own mean, read again from cache. The blocks' deviations
//! join the batch's through Chan's parallel formula, `M2 = Σ (M2_b + n_b (mean_b -
//! mean)²)`, which loses nothing to cancellation (every term is a sum of squares), unlike
//! the textbook `E[x²] - E[x]²`.
//!
//! The mean is the blocks' sums added as [`super::normalization`] always added them (in
//! blocks of `BLOCK` rows, then parts fixed by the machine): its bits do not change where
//! a block of `BLOCK` rows fits the cache (up to 64 features in f32), and nothing depends
//! on the thread count or on timing.

use super::{
    buffer::{Elem, min_len, sum_chunks},
    norm_sums::add_squared_deviations,
    reduce::{add_rows, sum_parts},
};
use rayon::prelude::*;

/// Bytes of one block of rows, read twice: L1 holds it on both x86 kinds (48 KiB) up to
/// 32 features, L2 beyond.
const BLOCK_BYTES: usize = 64 << 10;

/// Rows per block: `max` (the forward's accumulation block) where they fit
/// [`BLOCK_BYTES`], fewer for wide rows, never fewer than 16 (the blocks' statistics,
/// two rows of features each, must stay small beside the input).
fn block_rows<E>(c: usize, max: usize) -> usize {
    (BLOCK_BYTES / (c * std::mem::size_of::<E>()).max(1)).clamp(16.min(max), max)
}

/// `(mean, variance)` of each of the `c` columns of `xs` (rows of `c`), the variance
/// biased (divided by the row count), as the two-pass definition within rounding.
pub(super) fn batch_statistics<E: Elem>(xs: &[E], c: usize, max_block: usize) -> (Vec<E>, Vec<E>) {
    let c = c.max(1);
    let rows = xs.len() / c;
    let block = block_rows::<E>(c, max_block.max(1));
    let per = sum_chunks(rows).div_ceil(block) * block;
    let cast = |v: usize| E::from(v as f64).unwrap_or_else(E::zero);
    // Per part, each block's sums then its squared deviations about its own mean.
    let parts: Vec<Vec<E>> = (0..rows.div_ceil(per))
        .into_par_iter()
        .with_min_len(min_len())
        .map(|part| {
            let end = ((part + 1) * per).min(rows);
            let start = part * per;
            let mut out = vec![E::zero(); (end - start).div_ceil(block) * 2 * c];
            let mut mean = vec![E::zero(); c];
            for (first, stats) in (start..end).step_by(block).zip(out.chunks_exact_mut(2 * c)) {
                let last = (first + block).min(end);
                let rows = &xs[first * c..last * c];
                let (sum, m2) = stats.split_at_mut(c);
                add_rows(sum, rows);
                let n = cast(last - first);
                mean.iter_mut().zip(sum.iter()).for_each(|(m, s)| *m = *s / n);
                add_squared_deviations(m2, rows, &mean);
            }
            out
        })
        .collect();
    let totals = parts
        .iter()
        .map(|p| {
            let mut total = vec![E::zero(); c];
            for stats in p.chunks_exact(2 * c) {
                total.iter_mut().zip(&stats[..c]).for_each(|(t, s)| *t += *s);
            }
            total
        })
        .collect();
    let n = cast(rows);
    let mean: Vec<E> = sum_parts(totals, c).into_iter().map(|s| s / n).collect();
    let mut m2 = vec![E::zero(); c];
    for (part, p) in parts.iter().enumerate() {
        let end = ((part + 1) * per).min(rows);
        for (first, stats) in (part * per..end).step_by(block).zip(p.chunks_exact(2 * c)) {
            let nb = cast((first + block).min(end) - first);
            let (sum, dev) = stats.split_at(c);
            for j in 0..c {
                let d = sum[j] / nb - mean[j];
                m2[j] += dev[j] + nb * d * d;
            }
        }
    }
    (mean, m2.into_iter().map(|s| s / n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-pass definition in f64, the reference.
    fn two_pass(xs: &[f64], c: usize) -> (Vec<f64>, Vec<f64>) {
        let rows = (xs.len() / c) as f64;
        let mut mean = vec![0.0; c];
        xs.chunks_exact(c).for_each(|r| mean.iter_mut().zip(r).for_each(|(m, v)| *m += v / rows));
        let mut var = vec![0.0; c];
        xs.chunks_exact(c)
            .for_each(|r| var.iter_mut().zip(r).zip(&mean).for_each(|((s, v), m)| *s += (v - m) * (v - m) / rows));
        (mean, var)
    }

    fn data(rows: usize, c: usize, center: f64, spread: f64) -> Vec<f64> {
        (0..rows * c)
            .map(|i| center + (((i * 7919) % 1009) as f64 / 1009.0 - 0.5) * spread * ((i % c % 7) as f64 + 1.0))
            .collect()
    }

    /// Widths that fit a block of 256 rows and widths that shrink it (or a block of 7
    /// rows), row counts that leave a short last block: in f32 the statistics stay within
    /// a few roundings of the f64 definition; in f64, over values a million from zero
    /// spread by a hundredth (where `E[x²] - E[x]²` loses every digit), within 1e-6.
    #[test]
    fn one_pass_statistics_match_the_two_pass_definition() {
        for &(rows, c) in &[(1, 3), (17, 5), (300, 32), (1000, 64), (257, 200), (40, 1024), (4000, 16)] {
            for max in [256, 7] {
                let xs32: Vec<f32> = data(rows, c, 10.0, 1.0).iter().map(|v| *v as f32).collect();
                let exact: Vec<f64> = xs32.iter().map(|v| f64::from(*v)).collect();
                let (mean, var) = two_pass(&exact, c);
                let (m, v) = batch_statistics(&xs32, c, max);
                for j in 0..c {
                    assert!((f64::from(m[j]) - mean[j]).abs() <= 1e-6 * 20.0, "{rows}x{c} mean {j}");
                    let err = (f64::from(v[j]) - var[j]).abs();
                    assert!(err <= 1e-5 * var[j] + 1e-9, "{rows}x{c} var {j}: {} against {}", v[j], var[j]);
                }
                let far = data(rows, c, 1e6, 0.01);
                let (mean, var) = two_pass(&far, c);
                let (m, v) = batch_statistics(&far, c, max);
                for j in 0..c {
                    assert!((m[j] - mean[j]).abs() <= 1e-12 * mean[j].abs(), "{rows}x{c} mean {j}");
                    assert!(
                        (v[j] - var[j]).abs() <= 1e-6 * var[j] + 1e-15,
                        "{rows}x{c} var {j}: {} against {}",
                        v[j],
                        var[j]
                    );
                }
            }
        }
    }

    /// Where a block holds 256 rows, the mean is the forward's old one bit for bit
    /// (`blocked_sums` over 256-row blocks, as the forward summed before): the blocks' sums
    /// added in the same order.
    #[test]
    fn the_mean_keeps_its_bits() {
        let (rows, c) = (5000, 32);
        let xs: Vec<f32> = (0..rows * c).map(|i| ((i * 31) % 97) as f32 * 0.37 - 11.0).collect();
        // The forward's sums before this module: `normalization`'s blocks of 256 rows.
        let sums = super::super::normalization::blocked_sums(rows, c, |acc: &mut [f32], r| {
            add_rows(acc, &xs[r.start * c..r.end * c])
        });
        let want: Vec<f32> = sums.into_iter().map(|s| s / rows as f32).collect();
        let (mean, _) = batch_statistics(&xs, c, 256);
        assert_eq!(
            mean.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}
