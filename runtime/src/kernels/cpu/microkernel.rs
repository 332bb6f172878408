//! Register-blocked f32 microkernels with AVX2 and FMA, for the small products where the
//! `gemm` crate's packing and setup cost more than the arithmetic: a convolution over a
//! handful of taps (a first layer), its filter gradient (also straight from a pooled
//! gradient), and max pooling with its argmax.
//!
//! Each function has the same contract whatever the CPU: the caller passes slices and the
//! functions check every bound before touching memory, returning false (having done
//! nothing) where they do not apply. On x86-64 with AVX2 and FMA (checked once at run time)
//! the loops run on eight-float registers; elsewhere, and for f64, the callers' portable
//! loops do the same arithmetic.

use super::pool::Plane;

/// Where a convolution's taps lie in an image: tap `t` of pixel `p` is at
/// `base[p] + offset[t]` (see `patches::PatchIndex`). The farthest element any pair reaches
/// is found once, here, so that each kernel call checks its bounds in constant time:
/// finding it per call took 7 % of the residual model's step once Winograd's products
/// became sixteen microkernel calls per image.
pub(super) struct TapIndex {
    base: Vec<usize>,
    offset: Vec<usize>,
    reach: usize,
}

impl TapIndex {
    pub(super) fn new(base: Vec<usize>, offset: Vec<usize>) -> TapIndex {
        let far = |s: &[usize]| s.iter().copied().max().unwrap_or(0);
        let reach = far(&base).saturating_add(far(&offset));
        TapIndex { base, offset, reach }
    }

    pub(super) fn base(&self) -> &[usize] {
        &self.base
    }

    pub(super) fn offset(&self) -> &[usize] {
        &self.offset
    }

    /// The taps of `image` through this index.
    pub(super) fn over<'a>(&'a self, image: &'a [f32]) -> Taps<'a> {
        Taps { image, base: &self.base, offset: &self.offset, reach: self.reach }
    }
}

/// The taps of a convolution's patches read in place: tap `t` of pixel `p` is
/// `image[base[p] + offset[t]]`. Made by `TapIndex::over`, which vouches for `reach`.
#[derive(Clone, Copy)]
pub(super) struct Taps<'a> {
    pub image: &'a [f32],
    pub base: &'a [usize],
    pub offset: &'a [usize],
    /// The farthest `base[p] + offset[t]` over all pixels and taps.
    reach: usize,
}

impl Taps<'_> {
    /// Whether `m` pixels of `k` taps each can be read.
    pub(super) fn fits(&self, m: usize, k: usize) -> bool {
        m <= self.base.len() && k <= self.offset.len() && (m == 0 || k == 0 || self.reach < self.image.len())
    }
}

/// Where output rows go in memory: row `p` at `at[p]` (see `Out::scattered`), with the
/// farthest offset found once, as `TapIndex` does for its taps.
pub(super) struct RowIndex {
    at: Vec<usize>,
    reach: usize,
}

impl RowIndex {
    pub(super) fn new(at: Vec<usize>) -> RowIndex {
        let reach = at.iter().copied().max().unwrap_or(0);
        RowIndex { at, reach }
    }

    pub(super) fn at(&self) -> &[usize] {
        &self.at
    }
}

/// The output of a `conv_f32` product, which its kernels only write (never read), so it
/// may be uninitialized: a dense `m x n` matrix, or `m` rows of `n` scattered through a
/// larger buffer by a `RowIndex`. Scattered rows let the phased input gradient write each
/// phase's pixels straight into the image's gradient, where a copy per 128-byte pixel
/// (`memcpy` calls) had been 3 % of the ResNet's step.
pub(super) struct Out<'a> {
    data: &'a mut [std::mem::MaybeUninit<f32>],
    at: Option<&'a RowIndex>,
}

impl<'a> Out<'a> {
    pub(super) fn dense(out: &'a mut [f32]) -> Out<'a> {
        // SAFETY: the kernels only store initialized floats through it, so `out` stays
        // initialized.
        Out { data: unsafe { super::buffer::as_uninit(out) }, at: None }
    }

    pub(super) fn uninit(out: &'a mut [std::mem::MaybeUninit<f32>]) -> Out<'a> {
        Out { data: out, at: None }
    }

    pub(super) fn scattered(out: &'a mut [std::mem::MaybeUninit<f32>], at: &'a RowIndex) -> Out<'a> {
        Out { data: out, at: Some(at) }
    }

    /// Whether `m` rows of `n` fit.
    fn fits(&self, m: usize, n: usize) -> bool {
        match self.at {
            None => m.checked_mul(n).is_some_and(|e| e <= self.data.len()),
            Some(ix) => m <= ix.at.len() && (m == 0 || ix.reach.checked_add(n).is_some_and(|e| e <= self.data.len())),
        }
    }

    fn rows(&mut self, n: usize) -> Rows<'_> {
        Rows { base: self.data.as_mut_ptr().cast(), at: self.at.map(|ix| ix.at.as_slice()), n }
    }
}

/// An `Out` checked for `m` rows of `n`, as the kernels address it.
#[derive(Clone, Copy)]
pub(super) struct Rows<'a> {
    base: *mut f32,
    at: Option<&'a [usize]>,
    n: usize,
}

impl Rows<'_> {
    /// The first element of row `p`.
    ///
    /// # Safety
    /// `p` is below the `m` the `Out` was checked for.
    #[inline(always)]
    pub(super) unsafe fn row(self, p: usize) -> *mut f32 {
        // SAFETY: the caller's; `Out::fits` checked every such row against the buffer.
        unsafe {
            match self.at {
                None => self.base.add(p * self.n),
                Some(at) => self.base.add(*at.get_unchecked(p)),
            }
        }
    }
}

/// `out[p, c] = init[c] + Σ_t taps[p, t] · w[t, c]` for `p < m`, `c < n` (`w` is `k x n`,
/// `out` is `m` rows of `n`), then `max(·, 0)` if `relu`; `init` is zeros when `None`.
pub(super) fn conv_f32(
    taps: Taps<'_>,
    w: &[f32],
    init: Option<&[f32]>,
    relu: bool,
    mut out: Out<'_>,
    (m, k, n): (usize, usize, usize),
) -> bool {
    if !taps.fits(m, k) || w.len() < k * n || !out.fits(m, n) || init.is_some_and(|i| i.len() < n) {
        return false;
    }
    let rows = out.rows(n);
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: AVX-512F is present; every slice was checked to hold what is read, and
        // `out` every row written.
        unsafe { super::microkernel512::conv(taps, w, init, relu, rows, m, k, n) };
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2() {
        // SAFETY: AVX2 and FMA are present; as above.
        unsafe { avx2::conv(taps, w, init, relu, rows, m, k, n) };
        return true;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = rows;
    false
}

/// `acc[t, c] += Σ_p taps[p, t] · g[p, c]` (`g` is `m x n`, `acc` is `k x n`): the filter
/// gradient over `m` pixels.
pub(super) fn filter_grad_f32(taps: Taps<'_>, g: &[f32], acc: &mut [f32], (m, k, n): (usize, usize, usize)) -> bool {
    if !taps.fits(m, k) || g.len() < m * n || acc.len() < k * n {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: as above, with AVX-512F.
        unsafe { super::microkernel512::filter_grad(taps, g, acc, m, k, n) };
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2() {
        // SAFETY: as above.
        unsafe { avx2::filter_grad(taps, g, acc, m, k, n) };
        return true;
    }
    false
}

/// Max pooling of one NHWC image with the argmax (the cell `y * w + x` of each maximum),
/// eight channels per register; the first maximal cell of a window wins, as in the
/// portable loop. Needs the channels in eights.
pub(super) fn max_pool_f32(x: &[f32], pooled: &mut [f32], argmax: &mut [i32], pl: &Plane) -> bool {
    if !pl.c.is_multiple_of(8) || x.len() < pl.image() || pooled.len() < pl.pooled() || argmax.len() < pl.pooled() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2() {
        // SAFETY: AVX2 is present and the slices hold the image and its pooling.
        unsafe { avx2::max_pool(x, pooled, argmax, pl) };
        return true;
    }
    false
}

/// Most taps `pooled_filter_grad_f32` keeps in registers.
pub(super) const MAX_POOLED_TAPS: usize = 12;

/// The filter gradient of one image straight from its pooled gradient: `acc[t, c] +=
/// Σ_cells taps[cell, t] · g[cell, c]`, where `g[cell, c]` is the pooled gradient of each
/// window whose argmax for channel `c` is that cell (dropped where `pooled` is given and
/// not positive: the ReLU mask), built in registers and never stored. `bias` gets the kept
/// pooled gradients summed. Needs the channels in eights and at most `MAX_POOLED_TAPS` taps.
#[allow(clippy::too_many_arguments)]
pub(super) fn pooled_filter_grad_f32(
    taps: Taps<'_>,
    k: usize,
    argmax: &[i32],
    gradient: &[f32],
    pooled: Option<&[f32]>,
    pl: &Plane,
    acc: &mut [f32],
    mut bias: Option<&mut [f32]>,
) -> bool {
    let (c, q) = (pl.c, pl.pooled());
    let short = !taps.fits(pl.h * pl.w, k) || argmax.len() < q || gradient.len() < q || acc.len() < k * c;
    if c % 8 != 0
        || k == 0
        || k > MAX_POOLED_TAPS
        || short
        || pooled.is_some_and(|p| p.len() < q)
        || bias.as_ref().is_some_and(|b| b.len() < c)
    {
        return false;
    }
    if super::pooled_conv::pooled_filter_grad_avx512(taps, k, argmax, gradient, pooled, pl, acc, bias.as_deref_mut()) {
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2() {
        macro_rules! taps_of {
            ($($k:literal),*) => {
                match k {
                    // SAFETY: AVX2 is present; the slices were checked above; k == K.
                    $($k => unsafe { avx2::pooled_filter_grad::<$k>(taps, argmax, gradient, pooled, pl, acc, bias) },)*
                    _ => return false,
                }
            };
        }
        taps_of!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
        return true;
    }
    false
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Plane, Rows, Taps};
    use std::arch::x86_64::*;

    /// Pixels per convolution block: they share every load of a filter row. Six by two
    /// registers of channels is twelve accumulators, the two filter registers and the
    /// broadcast pixel: fifteen of the sixteen. On a Zen 3 core, per 14×14 image of
    /// Winograd F(2×2) 32 → 32 channels, 37.1 / 37.2 µs against four pixels' 38.9 / 37.8.
    const CONV_ROWS: usize = 6;

    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
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
        let full_cols = n - n % 16;
        let half_cols = n - n % 8;
        // SAFETY (every block below): p0 + R <= m, c0 + 8 B <= n, t < k: inside the
        // checked slices.
        unsafe {
            for c0 in (0..full_cols).step_by(16) {
                conv_rows::<2>(taps, w, init, relu, out, c0, m, k, n);
            }
            if half_cols > full_cols {
                conv_rows::<1>(taps, w, init, relu, out, full_cols, m, k, n);
            }
        }
        // The channels that do not fill a register.
        for p in 0..m {
            for c in half_cols..n {
                // Fused, tap by tap, as the registers' lanes: every channel's rounding is
                // the same whichever path computes it.
                let mut s = init.map_or(0.0, |i| i[c]);
                for t in 0..k {
                    s = taps.image[taps.base[p] + taps.offset[t]].mul_add(w[t * n + c], s);
                }
                // SAFETY: p < m, c < n: inside the checked rows.
                unsafe { out.row(p).add(c).write(if relu { s.max(0.0) } else { s }) };
            }
        }
    }

    /// Every pixel of `B` registers of channels from `c0`: blocks of `CONV_ROWS` pixels,
    /// then the rest in one smaller block. A scalar loop over the rest (a 7×7 tiling's 49th
    /// Winograd tile: one pixel in 49) had taken a third of this kernel's time, its
    /// multiply-adds serial in one register.
    ///
    /// # Safety
    /// AVX2 and FMA; `c0 + 8 B <= n`; the slices were checked for `m x k` taps, a `k x n`
    /// filter and `m x n` outputs.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn conv_rows<const B: usize>(
        taps: Taps<'_>,
        w: &[f32],
        init: Option<&[f32]>,
        relu: bool,
        out: Rows<'_>,
        c0: usize,
        m: usize,
        k: usize,
        n: usize,
    ) {
        let full = m - m % CONV_ROWS;
        // SAFETY: p0 + R <= m in every call; the caller's for the rest.
        unsafe {
            for p0 in (0..full).step_by(CONV_ROWS) {
                conv_block::<CONV_ROWS, B>(taps, w, init, relu, out, p0, c0, k, n);
            }
            match m - full {
                1 => conv_block::<1, B>(taps, w, init, relu, out, full, c0, k, n),
                2 => conv_block::<2, B>(taps, w, init, relu, out, full, c0, k, n),
                3 => conv_block::<3, B>(taps, w, init, relu, out, full, c0, k, n),
                4 => conv_block::<4, B>(taps, w, init, relu, out, full, c0, k, n),
                5 => conv_block::<5, B>(taps, w, init, relu, out, full, c0, k, n),
                _ => {}
            }
        }
    }

    /// `R` pixels by `B` registers of channels, every tap's filter row loaded once for all
    /// `R` pixels.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn conv_block<const R: usize, const B: usize>(
        taps: Taps<'_>,
        w: &[f32],
        init: Option<&[f32]>,
        relu: bool,
        out: Rows<'_>,
        p0: usize,
        c0: usize,
        k: usize,
        n: usize,
    ) {
        // SAFETY: the caller guarantees p0 + R <= m and c0 + 8 B <= n.
        unsafe {
            let mut start = [_mm256_setzero_ps(); B];
            if let Some(i) = init {
                for (b, s) in start.iter_mut().enumerate() {
                    *s = _mm256_loadu_ps(i.as_ptr().add(c0 + 8 * b));
                }
            }
            let mut acc = [start; R];
            let image = taps.image.as_ptr();
            let bases: [*const f32; R] = std::array::from_fn(|r| image.add(*taps.base.get_unchecked(p0 + r)));
            for t in 0..k {
                let wrow = w.as_ptr().add(t * n + c0);
                let wv: [__m256; B] = std::array::from_fn(|b| _mm256_loadu_ps(wrow.add(8 * b)));
                let off = *taps.offset.get_unchecked(t);
                for (regs, base) in acc.iter_mut().zip(bases) {
                    let x = _mm256_broadcast_ss(&*base.add(off));
                    for (a, wb) in regs.iter_mut().zip(wv) {
                        *a = _mm256_fmadd_ps(x, wb, *a);
                    }
                }
            }
            for (r, regs) in acc.iter().enumerate() {
                let dst = out.row(p0 + r).add(c0);
                for (b, &v) in regs.iter().enumerate() {
                    let v = if relu { _mm256_max_ps(v, _mm256_setzero_ps()) } else { v };
                    _mm256_storeu_ps(dst.add(8 * b), v);
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn filter_grad(taps: Taps<'_>, g: &[f32], acc: &mut [f32], m: usize, k: usize, n: usize) {
        let full = n - n % 16;
        for c0 in (0..full).step_by(16) {
            let mut t0 = 0;
            while t0 < k {
                // Up to six taps at a time: with two registers of channels each, twelve
                // accumulators, which leaves room for the loaded gradient.
                // SAFETY: t0 + taps <= k, c0 + 16 <= n.
                t0 += unsafe {
                    match k - t0 {
                        1 => taps_block::<1>(taps, g, acc, t0, c0, m, n),
                        2 => taps_block::<2>(taps, g, acc, t0, c0, m, n),
                        3 => taps_block::<3>(taps, g, acc, t0, c0, m, n),
                        4 => taps_block::<4>(taps, g, acc, t0, c0, m, n),
                        5 => taps_block::<5>(taps, g, acc, t0, c0, m, n),
                        _ => taps_block::<6>(taps, g, acc, t0, c0, m, n),
                    }
                };
            }
        }
        for t in 0..k {
            for c in full..n {
                let mut s = 0.0f32;
                for p in 0..m {
                    s = taps.image[taps.base[p] + taps.offset[t]].mul_add(g[p * n + c], s);
                }
                acc[t * n + c] += s;
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn taps_block<const T: usize>(
        taps: Taps<'_>,
        g: &[f32],
        acc: &mut [f32],
        t0: usize,
        c0: usize,
        m: usize,
        n: usize,
    ) -> usize {
        // SAFETY: the caller guarantees t0 + T <= k and c0 + 16 <= n; p < m.
        unsafe {
            let offs: [usize; T] = std::array::from_fn(|j| *taps.offset.get_unchecked(t0 + j));
            let mut sums = [[_mm256_setzero_ps(); 2]; T];
            for p in 0..m {
                let row = g.as_ptr().add(p * n + c0);
                let (g0, g1) = (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)));
                let base = taps.image.as_ptr().add(*taps.base.get_unchecked(p));
                for (pair, off) in sums.iter_mut().zip(offs) {
                    let x = _mm256_broadcast_ss(&*base.add(off));
                    pair[0] = _mm256_fmadd_ps(x, g0, pair[0]);
                    pair[1] = _mm256_fmadd_ps(x, g1, pair[1]);
                }
            }
            for (j, pair) in sums.iter().enumerate() {
                let dst = acc.as_mut_ptr().add((t0 + j) * n + c0);
                _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), pair[0]));
                _mm256_storeu_ps(dst.add(8), _mm256_add_ps(_mm256_loadu_ps(dst.add(8)), pair[1]));
            }
        }
        T
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn max_pool(x: &[f32], pooled: &mut [f32], argmax: &mut [i32], pl: &Plane) {
        let c = pl.c;
        for oy in 0..pl.oh {
            for ox in 0..pl.ow {
                let o = (oy * pl.ow + ox) * c;
                let (rows, cols) = pl.cells(oy, ox);
                let first = rows.start * pl.w + cols.start;
                for c0 in (0..c).step_by(8) {
                    // SAFETY: cells lie in the image and c0 + 8 <= c; o + c0 + 8 <= pooled.
                    unsafe {
                        let mut best = _mm256_loadu_ps(x.as_ptr().add(first * c + c0));
                        let mut at = _mm256_set1_epi32(first as i32);
                        for iy in rows.clone() {
                            for ix in cols.clone() {
                                let cell = iy * pl.w + ix;
                                let v = _mm256_loadu_ps(x.as_ptr().add(cell * c + c0));
                                let greater = _mm256_cmp_ps::<_CMP_GT_OQ>(v, best);
                                best = _mm256_blendv_ps(best, v, greater);
                                at = _mm256_blendv_epi8(
                                    at,
                                    _mm256_set1_epi32(cell as i32),
                                    _mm256_castps_si256(greater),
                                );
                            }
                        }
                        _mm256_storeu_ps(pooled.as_mut_ptr().add(o + c0), best);
                        _mm256_storeu_si256(argmax.as_mut_ptr().add(o + c0) as *mut __m256i, at);
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn pooled_filter_grad<const K: usize>(
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
        // pooled positions < pl.pooled(), c0 + 8 <= c, K taps, cells of a window < h * w.
        unsafe {
            let offs: [usize; K] = std::array::from_fn(|t| *taps.offset.get_unchecked(t));
            for c0 in (0..c).step_by(8) {
                let mut sums = [_mm256_setzero_ps(); K];
                let mut bias_sum = _mm256_setzero_ps();
                for oy in 0..pl.oh {
                    for ox in 0..pl.ow {
                        let o = (oy * pl.ow + ox) * c + c0;
                        let mut g = _mm256_loadu_ps(gradient.as_ptr().add(o));
                        if let Some(p) = pooled {
                            let positive =
                                _mm256_cmp_ps::<_CMP_GT_OQ>(_mm256_loadu_ps(p.as_ptr().add(o)), _mm256_setzero_ps());
                            g = _mm256_and_ps(g, positive);
                        }
                        let at = _mm256_loadu_si256(argmax.as_ptr().add(o) as *const __m256i);
                        // A position outside the plane (none, for a well-formed argmax) adds nothing.
                        let inside = _mm256_and_si256(
                            _mm256_cmpgt_epi32(at, _mm256_set1_epi32(-1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(plane), at),
                        );
                        g = _mm256_and_ps(g, _mm256_castsi256_ps(inside));
                        bias_sum = _mm256_add_ps(bias_sum, g);
                        let (rows, cols) = pl.cells(oy, ox);
                        for iy in rows {
                            for ix in cols.clone() {
                                let cell = iy * pl.w + ix;
                                let here = _mm256_cmpeq_epi32(at, _mm256_set1_epi32(cell as i32));
                                let gc = _mm256_and_ps(g, _mm256_castsi256_ps(here));
                                let base = taps.image.as_ptr().add(*taps.base.get_unchecked(cell));
                                for (s, off) in sums.iter_mut().zip(offs) {
                                    *s = _mm256_fmadd_ps(_mm256_broadcast_ss(&*base.add(off)), gc, *s);
                                }
                            }
                        }
                    }
                }
                for (t, s) in sums.iter().enumerate() {
                    let dst = acc.as_mut_ptr().add(t * c + c0);
                    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), *s));
                }
                if let Some(b) = bias.as_deref_mut() {
                    let dst = b.as_mut_ptr().add(c0);
                    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), bias_sum));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A convolution product, as one instruction set computes it.
    type Conv = unsafe fn(Taps<'_>, &[f32], Option<&[f32]>, bool, Rows<'_>, usize, usize, usize);
    /// A filter gradient, likewise.
    type Grad = unsafe fn(Taps<'_>, &[f32], &mut [f32], usize, usize, usize);

    /// Every kernel set this CPU runs: an AVX-512 core runs its AVX2 kernels in the test too.
    fn kernels() -> Vec<(&'static str, Conv, Grad)> {
        let mut sets: Vec<(&'static str, Conv, Grad)> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if crate::kernels::cpu::simd::has_avx512() {
                sets.push((
                    "avx512",
                    crate::kernels::cpu::microkernel512::conv,
                    crate::kernels::cpu::microkernel512::filter_grad,
                ));
            }
            if crate::kernels::cpu::simd::has_avx2() {
                sets.push(("avx2", avx2::conv, avx2::filter_grad));
            }
        }
        sets
    }

    fn data(len: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Both products of every kernel set against loops that do the same fused multiply-adds
    /// in the same order: equal bit for bit, for pixel, tap and channel counts that fill no
    /// block and every lane mask (AVX2: every smaller block of pixels, a half-width block of
    /// channels and the channels past it).
    #[test]
    fn products_equal_the_fused_multiply_add_loops_bit_for_bit() {
        for (name, conv, filter_grad) in kernels() {
            products_equal_the_loops(name, conv, filter_grad);
        }
    }

    fn products_equal_the_loops(name: &str, conv: Conv, filter_grad: Grad) {
        for (m, k, n) in [
            (1, 1, 1),
            (13, 9, 16),
            (25, 5, 17),
            (12, 16, 32),
            (37, 27, 40),
            (7, 14, 3),
            (24, 13, 48),
            (49, 16, 16),
            (19, 16, 5),
            (49, 32, 32),
            (50, 32, 32),
            (15, 9, 24),
            (16, 7, 29),
        ] {
            // Pixels read the image at scattered bases and offsets, as patches do.
            let base: Vec<usize> = (0..m).map(|p| (p * 7) % (m + 3)).collect();
            for contiguous in [false, true] {
                let offset: Vec<usize> =
                    (0..k).map(|t| if contiguous { t + m + 3 } else { (t * 5) % (k + 2) + m + 3 }).collect();
                let image = data(2 * (m + k) + 8, 1);
                let index = TapIndex::new(base.clone(), offset.clone());
                let taps = index.over(&image);
                let at = |p: usize, t: usize| image[base[p] + offset[t]];
                let (w, init) = (data(k * n, 2), data(n, 3));
                // Scattered rows: reversed, `n + 5` apart, two elements in; the gaps must
                // stay as they were.
                let rows = RowIndex::new((0..m).map(|p| (m - 1 - p) * (n + 5) + 2).collect());
                for relu in [false, true] {
                    let run = |mut out: Out<'_>| {
                        assert!(taps.fits(m, k) && out.fits(m, n));
                        // SAFETY: the kernel's instructions are present (`kernels`); the taps
                        // and rows were checked just now, the filter holds k x n.
                        unsafe { conv(taps, &w, Some(&init), relu, out.rows(n), m, k, n) };
                    };
                    let mut got = vec![f32::NAN; m * n];
                    run(Out::dense(&mut got));
                    let mut spread = vec![std::mem::MaybeUninit::new(f32::NAN); m * (n + 5) + 2];
                    run(Out::scattered(&mut spread, &rows));
                    // SAFETY: every element was initialized (NaN) and then written with floats.
                    let spread: Vec<f32> = spread.iter().map(|v| unsafe { v.assume_init() }).collect();
                    for p in 0..m {
                        for c in 0..n {
                            let s = (0..k).fold(init[c], |s, t| at(p, t).mul_add(w[t * n + c], s));
                            let want = if relu { s.max(0.0) } else { s };
                            assert_eq!(got[p * n + c].to_bits(), want.to_bits(), "{name} conv {m} {k} {n} at {p} {c}");
                            assert_eq!(
                                spread[rows.at()[p] + c].to_bits(),
                                want.to_bits(),
                                "{name} scattered {m} {k} {n}"
                            );
                        }
                    }
                    let written: usize = spread.iter().filter(|v| !v.is_nan()).count();
                    assert_eq!(written, spread.len() - 2 - 5 * m, "only the rows are written");
                }
                let (g, start) = (data(m * n, 4), data(k * n, 5));
                let mut got = start.clone();
                // SAFETY: as above; the gradient holds m x n, the sums k x n.
                unsafe { filter_grad(taps, &g, &mut got, m, k, n) };
                for t in 0..k {
                    for c in 0..n {
                        let s = (0..m).fold(0.0f32, |s, p| at(p, t).mul_add(g[p * n + c], s));
                        let want = start[t * n + c] + s;
                        assert_eq!(
                            got[t * n + c].to_bits(),
                            want.to_bits(),
                            "{name} filter grad {m} {k} {n} at {t} {c}"
                        );
                    }
                }
            }
        }
    }
}
