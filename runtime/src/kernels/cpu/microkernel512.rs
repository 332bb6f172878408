//! The products of `microkernel` (`conv_f32`, `filter_grad_f32`) on sixteen-float AVX-512
//! registers, for CPUs whose 512-bit units run at full width (Zen 5, Intel server cores):
//! there the eight-float AVX2 loops reach half of a core's multiply-add rate, which `gemm`
//! (AVX-512 itself) then beats on every product but the smallest.
//!
//! Channels that do not fill a register are masked, not left to a scalar loop, so any
//! channel count runs at the vector rate. Each output lane sums its taps in the same order,
//! one fused multiply-add per tap, as the AVX2 loops and the portable loops do: the results
//! are bit for bit theirs, so plans that pick different kernels for one product (fused and
//! unfused, forward through `conv_max_pool`) still agree exactly.
//!
//! Callers (`microkernel`) check every bound first; these functions trust them.

#![cfg(target_arch = "x86_64")]
// Indexed loops over constant bounds are how the register arrays stay registers.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use super::microkernel::{Rows, Taps};
use std::arch::x86_64::*;

/// The lanes of columns `c0..c0 + 16` that lie below `n`.
fn mask(c0: usize, n: usize) -> __mmask16 {
    let live = n.saturating_sub(c0).min(16);
    ((1u32 << live) - 1) as __mmask16
}

/// `out[p, c] = init[c] + Σ_t taps[p, t] · w[t, c]`, then `max(·, 0)` if `relu`.
///
/// # Safety
/// AVX-512F is present; `taps` fits `m` pixels of `k` taps, `w` holds `k x n`, `out` was
/// checked for `m` rows of `n`, `init` (when given) holds `n`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn conv(
    taps: Taps<'_>,
    w: &[f32],
    init: Option<&[f32]>,
    relu: bool,
    out: Rows<'_>,
    m: usize,
    k: usize,
    n: usize,
) {
    // Two registers of channels share each broadcast pixel where there are more than 16
    // channels; with one, more pixels share each filter row instead.
    // SAFETY (all arms): the caller's checks, passed through.
    unsafe {
        if n > 16 {
            conv_rows::<8, 2>(taps, w, init, relu, out, m, k, n)
        } else if k == STATIONARY_TAPS && contiguous(taps.offset, k) {
            conv_stationary::<true, false>(taps, w, init, relu, out, m, k, n)
        } else if k < STATIONARY_TAPS && contiguous(taps.offset, k) {
            conv_stationary::<false, false>(taps, w, init, relu, out, m, k, n)
        } else if k <= STATIONARY_TAPS {
            conv_stationary::<false, true>(taps, w, init, relu, out, m, k, n)
        } else {
            conv_rows::<16, 1>(taps, w, init, relu, out, m, k, n)
        }
    }
}

/// Most taps whose filter rows `conv_stationary` keeps in registers.
const STATIONARY_TAPS: usize = 16;

/// Whether the first `k` taps lie side by side (`offset[t] = offset[0] + t`), as a row of
/// a matrix does (Winograd's products), so that one pointer per pixel reaches them all.
fn contiguous(offset: &[usize], k: usize) -> bool {
    offset.iter().take(k).enumerate().all(|(t, &o)| o == offset[0] + t)
}

/// `conv` for at most 16 channels and `STATIONARY_TAPS` side-by-side taps: the whole
/// filter stays in registers and eight pixels at a time stream past it, each tap one
/// multiply-add with its broadcast read at a fixed distance from the pixel's pointer. The
/// general loop instead reloads a filter row per tap and keeps a pointer per pixel of
/// sixteen, more than the CPU has registers for: profiled on Winograd's 16-channel
/// products, a third of its loads were those pointers coming back from the stack.
///
/// `GATHER`: the taps are not side by side (a direct convolution's window), so each
/// broadcast adds the tap's offset, read from a table; the filter rows stay in registers all the same. The general loop this replaces
/// for at most 16 channels took the residual model's stem (1 to 16 channels, 3 x 3)
/// at about 90 GFLOP/s.
///
/// `FULL`: `k` is `STATIONARY_TAPS`. The tap loop then has a constant trip count, and
/// unrolled, the filter rows stay in registers; with `t < k` tested per tap, the compiler
/// kept them on the stack and reloaded one per tap.
#[target_feature(enable = "avx512f")]
unsafe fn conv_stationary<const FULL: bool, const GATHER: bool>(
    taps: Taps<'_>,
    w: &[f32],
    init: Option<&[f32]>,
    relu: bool,
    out: Rows<'_>,
    m: usize,
    k: usize,
    n: usize,
) {
    const R: usize = 8;
    let lanes = mask(0, n);
    // SAFETY (whole function): the caller checked the slices for m pixels of k taps, k
    // rows of n filter columns, and m x n outputs; masked lanes are neither read nor
    // written; taps past k are never read (their filter rows are zeros and skipped).
    unsafe {
        let mut wv = [_mm512_setzero_ps(); STATIONARY_TAPS];
        for t in 0..k {
            wv[t] = _mm512_maskz_loadu_ps(lanes, w.as_ptr().add(t * n));
        }
        let start = match init {
            Some(i) => _mm512_maskz_loadu_ps(lanes, i.as_ptr()),
            None => _mm512_setzero_ps(),
        };
        // Side by side, tap t lies t floats past the pixel's first; gathered, at its own
        // offset from the pixel's base (the table zero past `k`, never read there).
        let image = taps.image.as_ptr().add(if GATHER { 0 } else { *taps.offset.get_unchecked(0) });
        let mut off = [0usize; STATIONARY_TAPS];
        if GATHER {
            off[..k].copy_from_slice(&taps.offset[..k]);
        }
        let finish = |v: __m512| if relu { _mm512_max_ps(v, _mm512_setzero_ps()) } else { v };
        let mut p0 = 0;
        while p0 + R <= m {
            let rows: [*const f32; R] = std::array::from_fn(|r| image.add(*taps.base.get_unchecked(p0 + r)));
            let mut acc = [start; R];
            // One tap's multiply-adds for the R pixels; every index a constant where the
            // taps are spelled out, so `wv` can live in registers.
            macro_rules! tap {
                ($($t:literal)*) => {$(
                    if FULL || $t < k {
                        for r in 0..R {
                            let at = if GATHER { off[$t] } else { $t };
                            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(*rows[r].add(at)), wv[$t], acc[r]);
                        }
                    }
                )*};
            }
            tap!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
            for r in 0..R {
                _mm512_mask_storeu_ps(out.row(p0 + r), lanes, finish(acc[r]));
            }
            p0 += R;
        }
        for p in p0..m {
            let row = image.add(*taps.base.get_unchecked(p));
            let mut acc = start;
            for t in 0..k {
                let at = if GATHER { off[t] } else { t };
                acc = _mm512_fmadd_ps(_mm512_set1_ps(*row.add(at)), wv[t], acc);
            }
            _mm512_mask_storeu_ps(out.row(p), lanes, finish(acc));
        }
    }
}

#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn conv_rows<const R: usize, const B: usize>(
    taps: Taps<'_>,
    w: &[f32],
    init: Option<&[f32]>,
    relu: bool,
    out: Rows<'_>,
    m: usize,
    k: usize,
    n: usize,
) {
    let full = m - m % R;
    for c0 in (0..n).step_by(16 * B) {
        let masks: [__mmask16; B] = std::array::from_fn(|b| mask(c0 + 16 * b, n));
        // SAFETY: p0 + R <= m (then p < m), and the masks keep every column below n.
        unsafe {
            for p0 in (0..full).step_by(R) {
                conv_block::<R, B>(taps, w, init, relu, out, p0, c0, masks, k, n);
            }
            // The rest in fours, then one by one.
            let mut p = full;
            while p < m {
                if m - p >= 4 {
                    conv_block::<4, B>(taps, w, init, relu, out, p, c0, masks, k, n);
                    p += 4;
                } else {
                    conv_block::<1, B>(taps, w, init, relu, out, p, c0, masks, k, n);
                    p += 1;
                }
            }
        }
    }
}

#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn conv_block<const R: usize, const B: usize>(
    taps: Taps<'_>,
    w: &[f32],
    init: Option<&[f32]>,
    relu: bool,
    out: Rows<'_>,
    p0: usize,
    c0: usize,
    masks: [__mmask16; B],
    k: usize,
    n: usize,
) {
    // SAFETY: the caller guarantees p0 + R <= m; masked lanes are neither read nor written.
    unsafe {
        let mut start = [_mm512_setzero_ps(); B];
        if let Some(i) = init {
            for b in 0..B {
                start[b] = _mm512_maskz_loadu_ps(masks[b], i.as_ptr().add(c0 + 16 * b));
            }
        }
        let mut acc = [start; R];
        let image = taps.image.as_ptr();
        let bases: [*const f32; R] = std::array::from_fn(|r| image.add(*taps.base.get_unchecked(p0 + r)));
        for t in 0..k {
            let wrow = w.as_ptr().add(t * n + c0);
            let mut wv = [_mm512_setzero_ps(); B];
            for b in 0..B {
                wv[b] = _mm512_maskz_loadu_ps(masks[b], wrow.add(16 * b));
            }
            let off = *taps.offset.get_unchecked(t);
            for r in 0..R {
                let x = _mm512_set1_ps(*bases[r].add(off));
                for b in 0..B {
                    acc[r][b] = _mm512_fmadd_ps(x, wv[b], acc[r][b]);
                }
            }
        }
        for r in 0..R {
            for b in 0..B {
                let v = if relu { _mm512_max_ps(acc[r][b], _mm512_setzero_ps()) } else { acc[r][b] };
                _mm512_mask_storeu_ps(out.row(p0 + r).add(c0 + 16 * b), masks[b], v);
            }
        }
    }
}

/// `acc[t, c] += Σ_p taps[p, t] · g[p, c]`: a filter gradient over `m` pixels.
///
/// # Safety
/// AVX-512F is present; `taps` fits `m` pixels of `k` taps, `g` holds `m x n`, `acc`
/// `k x n`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn filter_grad(taps: Taps<'_>, g: &[f32], acc: &mut [f32], m: usize, k: usize, n: usize) {
    // SAFETY (all arms): the caller's checks, passed through.
    unsafe {
        if n > 16 {
            grad_taps::<8, 2, false>(taps, g, acc, m, k, n)
        } else if contiguous(taps.offset, k) {
            grad_taps::<16, 1, true>(taps, g, acc, m, k, n)
        } else {
            grad_taps::<16, 1, false>(taps, g, acc, m, k, n)
        }
    }
}

#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn grad_taps<const T: usize, const B: usize, const C: bool>(
    taps: Taps<'_>,
    g: &[f32],
    acc: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) {
    for c0 in (0..n).step_by(16 * B) {
        let masks: [__mmask16; B] = std::array::from_fn(|b| mask(c0 + 16 * b, n));
        // As few passes over the pixels as the register budget allows, of near-equal
        // size: 9 taps in 8 registers' budget are 5 + 4, not 8 + a pass for one tap.
        let size = k.div_ceil(k.div_ceil(T));
        let mut t0 = 0;
        while t0 < k {
            // SAFETY: t0 + taps <= k; the masks keep every column below n.
            t0 += unsafe {
                macro_rules! left {
                    ($($t:literal),*) => {
                        match size.min(k - t0) {
                            $($t if $t < T => grad_block::<$t, B, C>(taps, g, acc, t0, c0, masks, m, n),)*
                            _ => grad_block::<T, B, C>(taps, g, acc, t0, c0, masks, m, n),
                        }
                    };
                }
                left!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
            };
        }
    }
}

#[target_feature(enable = "avx512f")]
#[inline]
/// `C`: the taps lie side by side (see `contiguous`), so each is read at a fixed distance
/// from the pixel's pointer instead of through an offset held in a register (sixteen
/// offsets and the loop's pointers are more than the CPU has registers for).
unsafe fn grad_block<const T: usize, const B: usize, const C: bool>(
    taps: Taps<'_>,
    g: &[f32],
    acc: &mut [f32],
    t0: usize,
    c0: usize,
    masks: [__mmask16; B],
    m: usize,
    n: usize,
) -> usize {
    // SAFETY: the caller guarantees t0 + T <= k and p < m; masked lanes are neither read
    // nor written.
    unsafe {
        let offs: [usize; T] = std::array::from_fn(|j| *taps.offset.get_unchecked(t0 + j));
        let mut sums = [[_mm512_setzero_ps(); B]; T];
        for p in 0..m {
            let row = g.as_ptr().add(p * n + c0);
            let mut gv = [_mm512_setzero_ps(); B];
            for b in 0..B {
                gv[b] = _mm512_maskz_loadu_ps(masks[b], row.add(16 * b));
            }
            let base = taps.image.as_ptr().add(*taps.base.get_unchecked(p));
            for j in 0..T {
                let x = _mm512_set1_ps(*base.add(if C { offs[0] + j } else { offs[j] }));
                for b in 0..B {
                    sums[j][b] = _mm512_fmadd_ps(x, gv[b], sums[j][b]);
                }
            }
        }
        for j in 0..T {
            for b in 0..B {
                let dst = acc.as_mut_ptr().add((t0 + j) * n + c0 + 16 * b);
                let sum = _mm512_add_ps(_mm512_maskz_loadu_ps(masks[b], dst), sums[j][b]);
                _mm512_mask_storeu_ps(dst, masks[b], sum);
            }
        }
    }
    T
}
