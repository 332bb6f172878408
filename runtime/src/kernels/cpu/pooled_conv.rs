//! Convolution, bias, ReLU and max pooling of one image without the convolution's output
//! ever leaving registers: for each pooling window, the (at most four) convolution
//! outputs it covers are computed side by side, sixteen channels per AVX-512 register,
//! and only their maximum and its cell are stored.
//!
//! This is the forward of `_FusedConv2DMaxPool` when the convolution is direct (a first
//! layer: a few taps). Unfused, the convolution writes a 26×26×32 plane per image that
//! the pooling reads back and compares channel by channel; profiled on the tutorial CNN,
//! that round trip and the separate pooling pass cost as much as the arithmetic.
//!
//! Same contract as `microkernel`: every bound is checked before memory is touched, and
//! false (having done nothing) means the caller's general path must run. The arithmetic
//! is that path's, in its order (bias first, then the taps in order, one fused multiply-add
//! each), so the results are bit for bit the unfused plan's.

#[cfg(target_arch = "x86_64")]
use super::simd::has_avx512;
use super::{microkernel::Taps, pool::Plane};
use std::mem::MaybeUninit;

/// Most taps (`kh * kw * channels`): beyond, im2col and GEMM serve better.
const MAX_TAPS: usize = 32;

/// Most cells of a pooling window (a 2x2 window, or a clipped edge of a larger one).
const MAX_CELLS: usize = 4;

/// Whether `conv_max_pool_f32` runs for `k` taps and this pooling on this CPU: callers
/// ask before preparing its input (a padded copy of the image) for nothing.
pub(super) fn forward_applies(k: usize, pl: &Plane) -> bool {
    #[cfg(target_arch = "x86_64")]
    let cpu = has_avx512();
    #[cfg(not(target_arch = "x86_64"))]
    let cpu = false;
    cpu && k > 0 && k <= MAX_TAPS && pl.c.is_multiple_of(16) && pl.window_cells() <= MAX_CELLS
}

/// `pooled` and `argmax` (the cell `y * w + x` of the plane, first maximal cell winning)
/// of `act(conv + bias)`, where the convolution's output plane is the pooling's input
/// (`pl.h x pl.w`) and `w` is the `k x pl.c` filter matrix. Every element of the first
/// `pl.pooled()` of `pooled` and `argmax` is written when it returns true, so they may
/// start uninitialized: zeroing a batch's outputs first was a pass over 4 MB (the tutorial
/// CNN's) that the kernel then wrote again.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_max_pool_f32(
    taps: Taps<'_>,
    k: usize,
    w: &[f32],
    bias: &[f32],
    relu: bool,
    pl: &Plane,
    pooled: &mut [MaybeUninit<f32>],
    argmax: &mut [MaybeUninit<i32>],
) -> bool {
    let c = pl.c;
    let fits = taps.fits(pl.h * pl.w, k)
        && w.len() >= k * c
        && bias.len() >= c
        && pooled.len() >= pl.pooled()
        && argmax.len() >= pl.pooled();
    if !fits || !forward_applies(k, pl) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: AVX-512F is present; the slices were checked above.
        unsafe {
            avx512::conv_max_pool(taps, k, w, bias, relu, pl, pooled.as_mut_ptr().cast(), argmax.as_mut_ptr().cast())
        };
        return true;
    }
    false
}

/// The filter gradient straight from the pooled gradient, as
/// `microkernel::pooled_filter_grad_f32` defines it (whose checks the caller has made),
/// with sixteen channels per register and, where the channels allow, each tap's broadcast
/// shared by 32 channels. False (nothing done) without AVX-512F, with channels not in
/// sixteens, with more than four cells in a window or more than `MAX_GRAD_TAPS` taps.
#[allow(clippy::too_many_arguments)]
pub(super) fn pooled_filter_grad_avx512(
    taps: Taps<'_>,
    k: usize,
    argmax: &[i32],
    gradient: &[f32],
    pooled: Option<&[f32]>,
    pl: &Plane,
    acc: &mut [f32],
    bias: Option<&mut [f32]>,
) -> bool {
    if !pl.c.is_multiple_of(16) || pl.window_cells() > MAX_CELLS {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        macro_rules! taps_of {
            ($($k:literal),*) => {
                match (k, pl.c.is_multiple_of(32)) {
                    // SAFETY: AVX-512F is present; the caller checked the slices; k == K.
                    $(($k, true) => unsafe { avx512::pooled_filter_grad::<$k, 2>(taps, argmax, gradient, pooled, pl, acc, bias) },
                      ($k, false) => unsafe { avx512::pooled_filter_grad::<$k, 1>(taps, argmax, gradient, pooled, pl, acc, bias) },)*
                    _ => return false,
                }
            };
        }
        taps_of!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
        return true;
    }
    false
}

// Indexed loops over constant bounds are how the register arrays stay registers.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
pub(super) mod avx512 {
    use super::{MAX_CELLS, Plane, Taps};
    use std::arch::x86_64::*;

    /// `pooled` and `argmax` point at `pl.pooled()` writable elements each.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn conv_max_pool(
        taps: Taps<'_>,
        k: usize,
        w: &[f32],
        bias: &[f32],
        relu: bool,
        pl: &Plane,
        pooled: *mut f32,
        argmax: *mut i32,
    ) {
        // SAFETY: as for `blocks`, which the caller's checks cover.
        unsafe {
            if pl.c.is_multiple_of(32) {
                blocks::<2>(taps, k, w, bias, relu, pl, pooled, argmax)
            } else {
                blocks::<1>(taps, k, w, bias, relu, pl, pooled, argmax)
            }
        }
    }

    /// `B` registers of sixteen channels per pass over the windows: two when the channels
    /// allow, so that the window's addressing serves 32 channels. Two neighbouring windows
    /// of a row go together where the row has both, so that each filter row loaded serves
    /// eight cells: with one window at a time the loads (four taps and `B` filter
    /// registers for `4 B` multiply-adds) kept pace with the arithmetic, and the tutorial
    /// CNN's pooling convolution ran at half the core's multiply-add rate. The cells'
    /// accumulators are named, not indexed, so that they stay in registers (16 of the 32
    /// with `B` = 2, and 8 tap broadcasts); the filter rows are read from L1 at each tap.
    /// Each cell's sum is the same chain of multiply-adds either way.
    #[target_feature(enable = "avx512f")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn blocks<const B: usize>(
        taps: Taps<'_>,
        k: usize,
        w: &[f32],
        bias: &[f32],
        relu: bool,
        pl: &Plane,
        pooled: *mut f32,
        argmax: *mut i32,
    ) {
        let c = pl.c;
        // SAFETY (whole function): the caller checked that the k taps of every cell of the
        // plane can be read, that `w` holds k rows of c, `bias` c, and `pooled`/`argmax`
        // the pooling; c0 + 16 * B <= c; windows have at most MAX_CELLS cells.
        unsafe {
            let image = taps.image.as_ptr();
            let zero = _mm512_setzero_ps();
            for c0 in (0..c).step_by(16 * B) {
                let mut b = [zero; B];
                for (r, v) in b.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(bias.as_ptr().add(c0 + 16 * r));
                }
                let out = |oy: usize, ox: usize| (oy * pl.ow + ox) * c + c0;
                for oy in 0..pl.oh {
                    let mut ox = 0;
                    while ox + 1 < pl.ow {
                        let (cells, next) = (window(pl, oy, ox), window(pl, oy, ox + 1));
                        let [p0, p1, p2, p3] = cells.map(|cell| image.add(*taps.base.get_unchecked(cell)));
                        let [q0, q1, q2, q3] = next.map(|cell| image.add(*taps.base.get_unchecked(cell)));
                        let (mut a0, mut a1, mut a2, mut a3) = (b, b, b, b);
                        let (mut e0, mut e1, mut e2, mut e3) = (b, b, b, b);
                        for t in 0..k {
                            let off = *taps.offset.get_unchecked(t);
                            let wrow = w.as_ptr().add(t * c + c0);
                            let (x0, x1, x2, x3) = (
                                _mm512_set1_ps(*p0.add(off)),
                                _mm512_set1_ps(*p1.add(off)),
                                _mm512_set1_ps(*p2.add(off)),
                                _mm512_set1_ps(*p3.add(off)),
                            );
                            let (y0, y1, y2, y3) = (
                                _mm512_set1_ps(*q0.add(off)),
                                _mm512_set1_ps(*q1.add(off)),
                                _mm512_set1_ps(*q2.add(off)),
                                _mm512_set1_ps(*q3.add(off)),
                            );
                            for r in 0..B {
                                let wr = _mm512_loadu_ps(wrow.add(16 * r));
                                a0[r] = _mm512_fmadd_ps(x0, wr, a0[r]);
                                a1[r] = _mm512_fmadd_ps(x1, wr, a1[r]);
                                a2[r] = _mm512_fmadd_ps(x2, wr, a2[r]);
                                a3[r] = _mm512_fmadd_ps(x3, wr, a3[r]);
                                e0[r] = _mm512_fmadd_ps(y0, wr, e0[r]);
                                e1[r] = _mm512_fmadd_ps(y1, wr, e1[r]);
                                e2[r] = _mm512_fmadd_ps(y2, wr, e2[r]);
                                e3[r] = _mm512_fmadd_ps(y3, wr, e3[r]);
                            }
                        }
                        pool_store([a0, a1, a2, a3], &cells, relu, pooled, argmax, out(oy, ox));
                        pool_store([e0, e1, e2, e3], &next, relu, pooled, argmax, out(oy, ox + 1));
                        ox += 2;
                    }
                    if ox < pl.ow {
                        let cells = window(pl, oy, ox);
                        let [p0, p1, p2, p3] = cells.map(|cell| image.add(*taps.base.get_unchecked(cell)));
                        let (mut a0, mut a1, mut a2, mut a3) = (b, b, b, b);
                        for t in 0..k {
                            let off = *taps.offset.get_unchecked(t);
                            let wrow = w.as_ptr().add(t * c + c0);
                            let (x0, x1, x2, x3) = (
                                _mm512_set1_ps(*p0.add(off)),
                                _mm512_set1_ps(*p1.add(off)),
                                _mm512_set1_ps(*p2.add(off)),
                                _mm512_set1_ps(*p3.add(off)),
                            );
                            for r in 0..B {
                                let wr = _mm512_loadu_ps(wrow.add(16 * r));
                                a0[r] = _mm512_fmadd_ps(x0, wr, a0[r]);
                                a1[r] = _mm512_fmadd_ps(x1, wr, a1[r]);
                                a2[r] = _mm512_fmadd_ps(x2, wr, a2[r]);
                                a3[r] = _mm512_fmadd_ps(x3, wr, a3[r]);
                            }
                        }
                        pool_store([a0, a1, a2, a3], &cells, relu, pooled, argmax, out(oy, ox));
                    }
                }
            }
        }
    }

    /// The cells of window `(oy, ox)` in row order; a clipped window repeats its first
    /// cell, which can never win over itself.
    #[inline(always)]
    fn window(pl: &Plane, oy: usize, ox: usize) -> [usize; MAX_CELLS] {
        let (rows, cols) = pl.cells(oy, ox);
        let first = rows.start * pl.w + cols.start;
        let mut cells = [first; MAX_CELLS];
        let mut n = 0;
        for iy in rows {
            for ix in cols.clone() {
                if let Some(cell) = cells.get_mut(n) {
                    *cell = iy * pl.w + ix;
                }
                n += 1;
            }
        }
        cells
    }

    /// Sixteen channels' maximum over a window's cells `v` and, per channel, the cell it
    /// came from: the first maximal cell in row order wins (a later one must be greater,
    /// and a NaN is never), as in every pooling kernel. Also the pool inside Winograd
    /// F(4×4)'s output transform (`winograd4_512`).
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(in crate::kernels::cpu) fn first_max(v: &[__m512; MAX_CELLS], cells: &[usize; MAX_CELLS]) -> (__m512, __m512i) {
        let mut best = v[0];
        let mut at = _mm512_set1_epi32(cells[0] as i32);
        for j in 1..MAX_CELLS {
            let greater = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v[j], best);
            best = _mm512_mask_blend_ps(greater, best, v[j]);
            at = _mm512_mask_blend_epi32(greater, at, _mm512_set1_epi32(cells[j] as i32));
        }
        (best, at)
    }

    /// One window's four cells (`B` registers each): the ReLU, then the maximum and its
    /// cell (the first maximal one winning), stored at `o`.
    ///
    /// # Safety
    /// AVX-512F; `pooled` and `argmax` hold `o + 16 B` elements.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn pool_store<const B: usize>(
        acc: [[__m512; B]; MAX_CELLS],
        cells: &[usize; MAX_CELLS],
        relu: bool,
        pooled: *mut f32,
        argmax: *mut i32,
        o: usize,
    ) {
        let zero = _mm512_setzero_ps();
        for r in 0..B {
            let mut v: [__m512; MAX_CELLS] = std::array::from_fn(|j| acc[j][r]);
            if relu {
                for x in v.iter_mut() {
                    *x = _mm512_max_ps(*x, zero);
                }
            }
            let (best, at) = first_max(&v, cells);
            let o = o + 16 * r;
            // SAFETY: the caller's.
            unsafe {
                _mm512_storeu_ps(pooled.add(o), best);
                _mm512_storeu_si512(argmax.add(o) as *mut __m512i, at);
            }
        }
    }

    /// `K` taps by `B` registers of sums stay in registers for a whole pass over the
    /// windows (at most 24 of the 32), so the tap loops are over constants.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn pooled_filter_grad<const K: usize, const B: usize>(
        taps: Taps<'_>,
        argmax: &[i32],
        gradient: &[f32],
        pooled: Option<&[f32]>,
        pl: &Plane,
        acc: &mut [f32],
        mut bias: Option<&mut [f32]>,
    ) {
        let c = pl.c;
        let plane = (pl.h * pl.w) as i32;
        // SAFETY (whole function): every pointer stays within the slices the caller checked:
        // pooled positions < pl.pooled(), c0 + 16 * B <= c, K taps, cells of a window < h * w.
        unsafe {
            let mut offs = [0usize; K];
            offs.copy_from_slice(&taps.offset[..K]);
            let zero = _mm512_setzero_ps();
            for c0 in (0..c).step_by(16 * B) {
                let mut sums = [[zero; B]; K];
                let mut bias_sum = [zero; B];
                for oy in 0..pl.oh {
                    for ox in 0..pl.ow {
                        let o = (oy * pl.ow + ox) * c + c0;
                        let mut g = [zero; B];
                        let mut at = [_mm512_setzero_si512(); B];
                        for r in 0..B {
                            let o = o + 16 * r;
                            at[r] = _mm512_loadu_si512(argmax.as_ptr().add(o) as *const __m512i);
                            // A position outside the plane (none, for a well-formed argmax)
                            // adds nothing; nor does one the ReLU mask drops.
                            let mut keep = _mm512_cmpgt_epi32_mask(at[r], _mm512_set1_epi32(-1))
                                & _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(plane), at[r]);
                            if let Some(p) = pooled {
                                keep &= _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_loadu_ps(p.as_ptr().add(o)), zero);
                            }
                            g[r] = _mm512_maskz_mov_ps(keep, _mm512_loadu_ps(gradient.as_ptr().add(o)));
                            bias_sum[r] = _mm512_add_ps(bias_sum[r], g[r]);
                        }
                        let (rows, cols) = pl.cells(oy, ox);
                        for iy in rows {
                            for ix in cols.clone() {
                                let cell = iy * pl.w + ix;
                                let here = _mm512_set1_epi32(cell as i32);
                                let mut gc = [zero; B];
                                for r in 0..B {
                                    gc[r] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at[r], here), g[r]);
                                }
                                let base = taps.image.as_ptr().add(*taps.base.get_unchecked(cell));
                                for t in 0..K {
                                    let x = _mm512_set1_ps(*base.add(offs[t]));
                                    for r in 0..B {
                                        sums[t][r] = _mm512_fmadd_ps(x, gc[r], sums[t][r]);
                                    }
                                }
                            }
                        }
                    }
                }
                for t in 0..K {
                    for r in 0..B {
                        let dst = acc.as_mut_ptr().add(t * c + c0 + 16 * r);
                        _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst), sums[t][r]));
                    }
                }
                if let Some(b) = bias.as_deref_mut() {
                    for r in 0..B {
                        let dst = b.as_mut_ptr().add(c0 + 16 * r);
                        _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst), bias_sum[r]));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        conv::{Geometry, Method, conv_image},
        direct_conv::taps_f32,
        patches::PatchIndex,
        pool::{Plane, pool_image, unpool_image},
    };
    use super::*;
    use engine_graph::ops::{FusedActivation, Padding, Window};

    /// Initialized elements as slots the kernel writes.
    fn uninit<T>(s: &mut [T]) -> &mut [MaybeUninit<T>] {
        // SAFETY: the kernels under test write only initialized values.
        unsafe { super::super::buffer::as_uninit(s) }
    }

    #[test]
    fn convolution_and_pooling_in_registers_equal_the_two_passes_bit_for_bit() -> crate::Result<()> {
        // (input channels, kernel, convolution padding, filters, pool window, pool stride,
        // pool padding, relu); small integers make ties, which test "first cell wins".
        let cases = [
            (1, 3, 0, 32, 2, 2, Padding::Valid, true),
            (1, 3, 1, 16, 2, 2, Padding::Same, false),
            (3, 2, 0, 48, 2, 1, Padding::Valid, true),
            (1, 4, 1, 16, 2, 2, Padding::Same, true),
            (2, 1, 0, 16, 1, 1, Padding::Valid, false),
        ];
        for (c, k, pad, f, pw, ps, ppad, relu) in cases {
            let (h, wd) = (9, 8);
            let (oh, ow) = ((h + 2 * pad - k) + 1, (wd + 2 * pad - k) + 1);
            let g = Geometry { n: 1, h, w: wd, c, kh: k, kw: k, oh, ow, sh: 1, sw: 1, top: pad, left: pad };
            let win = Window { kernel: [pw, pw], strides: [ps, ps], padding: ppad };
            let pl = Plane::for_probe(&win, [oh, ow], f)?;
            let x: Vec<f32> = (0..g.image()).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
            let w: Vec<f32> = (0..g.patch() * f).map(|i| ((i * 13) % 7) as f32 - 3.0).collect();
            let bias: Vec<f32> = (0..f).map(|i| (i % 3) as f32 - 1.0).collect();
            let act = if relu { FusedActivation::Relu } else { FusedActivation::Linear };
            let (mut y, mut scratch, mut pos) = (vec![0.0f32; g.pixels() * f], Vec::new(), vec![0i32; f]);
            let (mut want, mut want_at) = (vec![0.0f32; pl.pooled()], vec![0i32; pl.pooled()]);
            let method = Method::of(&g, f);
            let wf = method.filter(&w, g.c, f);
            assert!(conv_image(&x, &g, &method, &wf, f, Some((&bias, act)), &mut y, &mut scratch, 1));
            pool_image(&y, &mut want, &mut want_at, &mut pos, &pl);

            let index = PatchIndex::new(&g);
            let mut padded = Vec::new();
            let image = index.image(&x, &g, &mut padded);
            let taps = taps_f32(image, &index).ok_or_else(|| crate::RuntimeError::Read("not f32".into()))?;
            let (mut got, mut got_at) = (vec![0.0f32; pl.pooled()], vec![0i32; pl.pooled()]);
            let ran = conv_max_pool_f32(taps, g.patch(), &w, &bias, relu, &pl, uninit(&mut got), uninit(&mut got_at));
            #[cfg(target_arch = "x86_64")]
            assert_eq!(ran, has_avx512(), "case {c} {k} {pad} {f}");
            if ran {
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "values differ: c={c} k={k} pad={pad} f={f} pool {pw}/{ps}");
                assert_eq!(got_at, want_at, "argmax differs: c={c} k={k} pad={pad} f={f} pool {pw}/{ps}");
            }
        }
        Ok(())
    }
    #[test]
    fn filter_gradient_from_the_pooled_gradient_equals_unpooling_then_the_definition() -> crate::Result<()> {
        // (input channels, kernel, filters, pool window, pool stride, pool padding, relu
        // mask, bias); small integers keep every sum exact, whatever its order.
        let cases = [
            (1, 3, 32, 2, 2, Padding::Valid, true, true),
            (1, 3, 16, 2, 2, Padding::Same, false, false),
            (3, 2, 48, 2, 1, Padding::Valid, true, true),
            (2, 2, 16, 1, 1, Padding::Valid, false, true),
        ];
        for (c, k, f, pw, ps, ppad, relu, with_bias) in cases {
            let (h, wd) = (9, 8);
            let (oh, ow) = (h - k + 1, wd - k + 1);
            let g = Geometry { n: 1, h, w: wd, c, kh: k, kw: k, oh, ow, sh: 1, sw: 1, top: 0, left: 0 };
            let win = Window { kernel: [pw, pw], strides: [ps, ps], padding: ppad };
            let pl = Plane::for_probe(&win, [oh, ow], f)?;
            let x: Vec<f32> = (0..g.image()).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
            let y: Vec<f32> = (0..g.pixels() * f).map(|i| ((i * 29) % 13) as f32 - 9.0).collect();
            let (mut pooled, mut at, mut pos) = (vec![0.0f32; pl.pooled()], vec![0i32; pl.pooled()], vec![0i32; f]);
            pool_image(&y, &mut pooled, &mut at, &mut pos, &pl);
            let grad: Vec<f32> = (0..pl.pooled()).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
            let mask = relu.then_some(&pooled[..]);

            let mut dy = vec![0.0f32; g.pixels() * f];
            unpool_image(&mut dy, &at, &grad, f, (oh * ow) as i64, mask);
            let index = PatchIndex::new(&g);
            let (mut want, mut want_bias) = (vec![0.0f32; g.patch() * f], vec![0.0f32; f]);
            for p in 0..g.pixels() {
                for ch in 0..f {
                    want_bias[ch] += dy[p * f + ch];
                    for (t, off) in index.taps.offset().iter().enumerate() {
                        want[t * f + ch] += x[index.taps.base()[p] + off] * dy[p * f + ch];
                    }
                }
            }
            let taps = taps_f32(&x, &index).ok_or_else(|| crate::RuntimeError::Read("not f32".into()))?;
            let (mut got, mut got_bias) = (vec![0.0f32; g.patch() * f], vec![0.0f32; f]);
            let bias = with_bias.then_some(&mut got_bias[..]);
            let ran = pooled_filter_grad_avx512(taps, g.patch(), &at, &grad, mask, &pl, &mut got, bias);
            #[cfg(target_arch = "x86_64")]
            assert_eq!(ran, has_avx512(), "case {c} {k} {f}");
            if ran {
                assert_eq!(got, want, "filter gradient: c={c} k={k} f={f} pool {pw}/{ps} relu {relu}");
                if with_bias {
                    assert_eq!(got_bias, want_bias, "bias gradient: c={c} k={k} f={f} pool {pw}/{ps}");
                }
            }
        }
        Ok(())
    }
}
