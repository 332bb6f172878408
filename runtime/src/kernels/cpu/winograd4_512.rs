//! F(4×4, 3×3)'s three tile transforms (see `winograd4`) on sixteen-channel AVX-512
//! registers, for channel counts in sixteens: a 6×6 tile is 36 registers, transformed
//! down its columns, then across its rows, with fused multiply-adds for the constants.
//!
//! Every function returns false, having done nothing, where it does not apply (no AVX-512,
//! channels not in sixteens, or a buffer too short), and `winograd4`'s portable loops run
//! instead.

#![cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]

use super::{
    winograd4::{POSITIONS, output_fits},
    winograd512::{Layout, applies},
};

/// `v` = `Bᵀ d B` of every 6×6 block of `x`, as `winograd4::transform_input`.
pub(super) fn transform_input(x: &[f32], l: &Layout, c: usize, v: &mut [f32]) -> bool {
    if !applies(c) || x.len() < l.h * l.w * c || v.len() < l.count() * POSITIONS * c {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512F is present; only pixels inside `h x w` are read, and every tile's
    // transform lies in `v` (checked above); c is a multiple of 16.
    unsafe {
        avx512::transform_input(x, l, c, v)
    };
    true
}

/// `y` = `Aᵀ m A` of every tile, plus `bias` and `skip`, then ReLU if `relu`, masked by
/// `gate`, as
/// `winograd4::transform_output`: every pixel of the `oh x ow` plane stored, none read.
#[allow(clippy::too_many_arguments, reason = "the output transform's epilogue operands, each optional")]
pub(super) fn transform_output(
    m: &[f32],
    l: &Layout,
    f: usize,
    bias: Option<&[f32]>,
    skip: Option<&[f32]>,
    relu: bool,
    gate: Option<&[f32]>,
    y: &mut [std::mem::MaybeUninit<f32>],
) -> bool {
    let image = l.oh * l.ow * f;
    if !applies(f)
        || !output_fits(l, f, y.len(), m.len(), bias.map(<[f32]>::len))
        || skip.is_some_and(|s| s.len() < image)
        || gate.is_some_and(|s| s.len() < image)
    {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as above; pixels are stored only inside `oh x ow`, and `skip` and `gate` are
    // read there.
    unsafe {
        avx512::transform_output(m, l, f, bias, skip, relu, gate, y)
    };
    true
}

/// `e` = `A ∂y Aᵀ` of every 4×4 block of `dy`, and the bias gradient, as
/// `winograd4::transform_output_grad`.
pub(super) fn transform_output_grad(dy: &[f32], l: &Layout, f: usize, e: &mut [f32], bias: Option<&mut [f32]>) -> bool {
    if !applies(f) || !output_fits(l, f, dy.len(), e.len(), bias.as_ref().map(|b| b.len())) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as above; pixels are read only inside `oh x ow`.
    unsafe {
        avx512::transform_output_grad(dy, l, f, e, bias)
    };
    true
}

// Indexed loops over constant bounds are how the register arrays stay registers.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
mod avx512 {
    use super::Layout;
    use std::arch::x86_64::*;

    const IN: usize = 6;
    const OUT: usize = 4;

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transform_input(x: &[f32], l: &Layout, c: usize, v: &mut [f32]) {
        // SAFETY (whole function): the caller's checks; a pixel is read only where its row
        // and column lie inside the image (elsewhere its load is masked off entirely, which
        // suppresses any access).
        unsafe {
            let (src, dst) = (x.as_ptr(), v.as_mut_ptr());
            let count = l.count();
            // Consecutive positions of one tile lie `stride` floats apart in `v`.
            let stride = count * c;
            let inside = |at: usize, pad: usize, size: usize| at >= pad && at - pad < size;
            let (w, c_) = (l.w as isize, c as isize);
            for t in 0..count {
                let (y0, x0) = (OUT * (t / l.tw), OUT * (t % l.tw));
                // Lane masks: all sixteen where the pixel lies inside the image, none outside.
                // A masked-off load touches no memory, so an edge tile needs no padded copy
                // and no branch per pixel, and `d` stays in registers.
                let rows: [__mmask16; IN] = std::array::from_fn(|i| if inside(y0 + i, l.top, l.h) { !0 } else { 0 });
                let cols: [__mmask16; IN] = std::array::from_fn(|j| if inside(x0 + j, l.left, l.w) { !0 } else { 0 });
                let corner = ((y0 as isize - l.top as isize) * w + x0 as isize - l.left as isize) * c_;
                for c0 in (0..c).step_by(16) {
                    let at = src.wrapping_offset(corner + c0 as isize);
                    tile(at, w * c_, c_, &rows, &cols, dst.add(t * c + c0), stride);
                }
            }
        }
    }

    /// `Bᵀ d B` of the 6×6 tile at `at` (rows `row` floats apart, pixels `px`), its 36
    /// positions stored `stride` floats apart from `out` on.
    ///
    /// In two halves of three rows of `Bᵀ d` each: the first needs `d`'s rows 0 to 4, the
    /// second rows 1 to 5. Each half has 18 values live, plus a column of `d`, so nothing
    /// spills; the whole tile at once had 36 live values and more registers' worth of
    /// spills than loads. The rows a half shares with the other are loaded again, from L1.
    /// (Unmasked loads for the tiles inside the image were no faster.)
    ///
    /// # Safety
    /// Every pixel whose row and column masks are set must be readable, and the 36 stores
    /// must lie inside one writable buffer.
    #[target_feature(enable = "avx512f")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        at: *const f32,
        row: isize,
        px: isize,
        rows: &[__mmask16; IN],
        cols: &[__mmask16; IN],
        out: *mut f32,
        stride: usize,
    ) {
        let (two, four, five) = (_mm512_set1_ps(2.0), _mm512_set1_ps(4.0), _mm512_set1_ps(5.0));
        // SAFETY: the caller's; a masked-off load touches no memory.
        let load = |i: usize, j: usize| unsafe {
            let p = at.wrapping_offset(i as isize * row + j as isize * px);
            _mm512_maskz_loadu_ps(rows[i] & cols[j], p)
        };
        let zero = _mm512_setzero_ps();
        // `Bᵀ d`'s rows 0 to 2: `4 d0 - 5 d2 + d4` and `(d4 - 4 d2) ± (d3 - 4 d1)`.
        let mut half = [[zero; IN]; 3];
        for j in 0..IN {
            let d: [__m512; 5] = std::array::from_fn(|i| load(i, j));
            let t0 = _mm512_fnmadd_ps(four, d[2], d[4]);
            let t1 = _mm512_fnmadd_ps(four, d[1], d[3]);
            half[0][j] = _mm512_fmadd_ps(four, d[0], _mm512_fnmadd_ps(five, d[2], d[4]));
            half[1][j] = _mm512_add_ps(t0, t1);
            half[2][j] = _mm512_sub_ps(t0, t1);
        }
        // SAFETY: the caller's.
        unsafe { store_rows(out, stride, 0, &half) };
        // Rows 3 to 5: `(d4 - d2) ± 2 (d3 - d1)` and `4 d1 - 5 d3 + d5`.
        for j in 0..IN {
            let d: [__m512; 5] = std::array::from_fn(|i| load(i + 1, j));
            let t2 = _mm512_sub_ps(d[3], d[1]);
            let t3 = _mm512_sub_ps(d[2], d[0]);
            half[0][j] = _mm512_fmadd_ps(two, t3, t2);
            half[1][j] = _mm512_fnmadd_ps(two, t3, t2);
            half[2][j] = _mm512_fmadd_ps(four, d[0], _mm512_fnmadd_ps(five, d[2], d[4]));
        }
        // SAFETY: the caller's.
        unsafe { store_rows(out, stride, 3, &half) };
    }

    /// Rows `first..first + 3` of a transformed tile: `rows[r] B`, position `(first + r,
    /// k)` stored `stride` floats apart from `out` on, in position order.
    ///
    /// # Safety
    /// The stores must lie inside one writable buffer.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store_rows(out: *mut f32, stride: usize, first: usize, rows: &[[__m512; IN]; 3]) {
        // SAFETY: the caller's.
        unsafe {
            let mut out = out.add(first * IN * stride);
            for r in rows {
                for v in input_1d(*r) {
                    _mm512_storeu_ps(out, v);
                    out = out.add(stride);
                }
            }
        }
    }

    /// `Bᵀ d`: `(4 d0 - 5 d2 + d4, (d4 - 4 d2) ± (d3 - 4 d1), (d4 - d2) ± 2 (d3 - d1),
    /// 4 d1 - 5 d3 + d5)`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn input_1d(d: [__m512; IN]) -> [__m512; IN] {
        let (two, four, five) = (_mm512_set1_ps(2.0), _mm512_set1_ps(4.0), _mm512_set1_ps(5.0));
        let t0 = _mm512_fnmadd_ps(four, d[2], d[4]);
        let t1 = _mm512_fnmadd_ps(four, d[1], d[3]);
        let t2 = _mm512_sub_ps(d[4], d[2]);
        let t3 = _mm512_sub_ps(d[3], d[1]);
        [
            _mm512_fmadd_ps(four, d[0], _mm512_fnmadd_ps(five, d[2], d[4])),
            _mm512_add_ps(t0, t1),
            _mm512_sub_ps(t0, t1),
            _mm512_fmadd_ps(two, t3, t2),
            _mm512_fnmadd_ps(two, t3, t2),
            _mm512_fmadd_ps(four, d[1], _mm512_fnmadd_ps(five, d[3], d[5])),
        ]
    }

    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments, reason = "the output transform's epilogue operands, each optional")]
    pub(super) unsafe fn transform_output(
        m: &[f32],
        l: &Layout,
        f: usize,
        bias: Option<&[f32]>,
        skip: Option<&[f32]>,
        relu: bool,
        gate: Option<&[f32]>,
        y: &mut [std::mem::MaybeUninit<f32>],
    ) {
        let count = l.count();
        // SAFETY (whole function): the caller's checks.
        unsafe {
            let (src, dst) = (m.as_ptr(), y.as_mut_ptr().cast::<f32>());
            for t in 0..count {
                let (oy, ox) = (OUT * (t / l.tw), OUT * (t % l.tw));
                for f0 in (0..f).step_by(16) {
                    // `Aᵀ` down each column as it is loaded, then across each of the four
                    // rows: 24 values live, where loading the 36 positions first spilled.
                    let from = src.add(t * f + f0);
                    let mut rows = [[_mm512_setzero_ps(); IN]; OUT];
                    for j in 0..IN {
                        let col =
                            output_1d(std::array::from_fn(|i| _mm512_loadu_ps(from.add((i * IN + j) * count * f))));
                        for r in 0..OUT {
                            rows[r][j] = col[r];
                        }
                    }
                    let b = bias.map(|b| _mm512_loadu_ps(b.as_ptr().add(f0)));
                    for r in 0..OUT {
                        if oy + r >= l.oh {
                            continue;
                        }
                        let px = output_1d(rows[r]);
                        for s in 0..OUT {
                            if ox + s >= l.ow {
                                continue;
                            }
                            let at = ((oy + r) * l.ow + ox + s) * f + f0;
                            let mut v = px[s];
                            if let Some(b) = b {
                                v = _mm512_add_ps(v, b);
                            }
                            if let Some(sk) = skip {
                                v = _mm512_add_ps(v, _mm512_loadu_ps(sk.as_ptr().add(at)));
                            }
                            if relu {
                                v = _mm512_max_ps(v, _mm512_setzero_ps());
                            }
                            if let Some(g) = gate {
                                // Ordered: a NaN in `gate` is not positive either.
                                let keep = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(
                                    _mm512_loadu_ps(g.as_ptr().add(at)),
                                    _mm512_setzero_ps(),
                                );
                                v = _mm512_maskz_mov_ps(keep, v);
                            }
                            _mm512_storeu_ps(dst.add(at), v);
                        }
                    }
                }
            }
        }
    }

    /// `Aᵀ m`: with `a, b = m1 ± m2` and `c, d = m3 ± m4`, `(m0 + a + c, b + 2 d, a + 4 c,
    /// b + 8 d + m5)`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn output_1d(m: [__m512; IN]) -> [__m512; OUT] {
        let (two, four, eight) = (_mm512_set1_ps(2.0), _mm512_set1_ps(4.0), _mm512_set1_ps(8.0));
        let (a, b) = (_mm512_add_ps(m[1], m[2]), _mm512_sub_ps(m[1], m[2]));
        let (c, d) = (_mm512_add_ps(m[3], m[4]), _mm512_sub_ps(m[3], m[4]));
        [
            _mm512_add_ps(_mm512_add_ps(m[0], a), c),
            _mm512_fmadd_ps(two, d, b),
            _mm512_fmadd_ps(four, c, a),
            _mm512_add_ps(_mm512_fmadd_ps(eight, d, b), m[5]),
        ]
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transform_output_grad(
        dy: &[f32],
        l: &Layout,
        f: usize,
        e: &mut [f32],
        bias: Option<&mut [f32]>,
    ) {
        let count = l.count();
        // SAFETY (whole function): the caller's checks.
        unsafe {
            let (src, dst) = (dy.as_ptr(), e.as_mut_ptr());
            let bias = bias.map(|b| b.as_mut_ptr());
            for f0 in (0..f).step_by(16) {
                // Every pixel lies in exactly one tile: the bias gradient is the sum of the
                // tiles' pixels, kept in a register while `e` is built.
                let mut sum = _mm512_setzero_ps();
                for t in 0..count {
                    let (oy, ox) = (OUT * (t / l.tw), OUT * (t % l.tw));
                    let at = |r: usize, s: usize| {
                        if oy + r < l.oh && ox + s < l.ow {
                            _mm512_loadu_ps(src.add(((oy + r) * l.ow + ox + s) * f + f0))
                        } else {
                            _mm512_setzero_ps()
                        }
                    };
                    let mut cols = [[_mm512_setzero_ps(); OUT]; IN];
                    for s in 0..OUT {
                        let g: [__m512; OUT] = std::array::from_fn(|r| at(r, s));
                        if bias.is_some() {
                            sum =
                                _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(g[0], g[1]), _mm512_add_ps(g[2], g[3])));
                        }
                        let col = grad_1d(g);
                        for i in 0..IN {
                            cols[i][s] = col[i];
                        }
                    }
                    // Each row stored as it is transformed: 24 values live instead of 36.
                    let mut out = dst.add(t * f + f0);
                    for i in 0..IN {
                        for v in grad_1d(cols[i]) {
                            _mm512_storeu_ps(out, v);
                            out = out.add(count * f);
                        }
                    }
                }
                if let Some(b) = bias {
                    _mm512_storeu_ps(b.add(f0), _mm512_add_ps(_mm512_loadu_ps(b.add(f0)), sum));
                }
            }
        }
    }

    /// `A g`: with `p, q = g0 + g2, g1 + g3` and `p4, q4 = g0 + 4 g2, 2 g1 + 8 g3`,
    /// `(g0, p + q, p - q, p4 + q4, p4 - q4, g3)`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn grad_1d(g: [__m512; OUT]) -> [__m512; IN] {
        let (four, eight) = (_mm512_set1_ps(4.0), _mm512_set1_ps(8.0));
        let (p, q) = (_mm512_add_ps(g[0], g[2]), _mm512_add_ps(g[1], g[3]));
        let p4 = _mm512_fmadd_ps(four, g[2], g[0]);
        let q4 = _mm512_fmadd_ps(eight, g[3], _mm512_add_ps(g[1], g[1]));
        [g[0], _mm512_add_ps(p, q), _mm512_sub_ps(p, q), _mm512_add_ps(p4, q4), _mm512_sub_ps(p4, q4), g[3]]
    }
}
