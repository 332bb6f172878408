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

/// Whether [`transform_output_pool`] runs for `l` and `f` channels: AVX-512, channels in
/// sixteens, and an output of even height and width, so that every 2×2 window of stride 2
/// is whole and inside one 4×4 tile.
pub(super) fn pool_fits(l: &Layout, f: usize) -> bool {
    applies(f) && l.oh.is_multiple_of(2) && l.ow.is_multiple_of(2)
}

/// [`transform_output`] (with `bias`, `skip` and the ReLU, no gate) max-pooled 2×2 with
/// stride 2 in registers: `pooled` and `argmax` (each window's cell `y * ow + x` in the
/// convolution's plane, the first maximal cell winning, as the pooling kernels choose it)
/// of `oh / 2 x ow / 2 x f`, every element written and the plane itself never stored.
/// False, having done nothing, where it does not apply or a buffer does not fit.
#[allow(clippy::too_many_arguments, reason = "the output transform's epilogue operands, each optional")]
pub(super) fn transform_output_pool(
    m: &[f32],
    l: &Layout,
    f: usize,
    bias: Option<&[f32]>,
    skip: Option<&[f32]>,
    relu: bool,
    pooled: &mut [std::mem::MaybeUninit<f32>],
    argmax: &mut [std::mem::MaybeUninit<i32>],
) -> bool {
    let (image, q) = (l.oh * l.ow * f, (l.oh / 2) * (l.ow / 2) * f);
    if !pool_fits(l, f)
        || !output_fits(l, f, image, m.len(), bias.map(<[f32]>::len))
        || skip.is_some_and(|s| s.len() < image)
        || pooled.len() < q
        || argmax.len() < q
    {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as `transform_output`'s; each window's maximum is stored inside the first
    // `q` elements of `pooled` and `argmax` (checked above).
    unsafe {
        avx512::transform_output_pool(m, l, f, bias, skip, relu, pooled.as_mut_ptr().cast(), argmax.as_mut_ptr().cast())
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
    use crate::kernels::cpu::pooled_conv::avx512::first_max;
    use std::arch::x86_64::*;

    const IN: usize = 6;
    const OUT: usize = 4;

    /// Tiles of one row whose columns a pass transforms together: `4 RUN + 2` columns of
    /// `Bᵀ d` (13 KB on the stack for eight tiles, in L1 until the row pass reads them).
    const RUN: usize = 8;
    const COLUMNS: usize = OUT * RUN + 2;

    /// In two passes over each run of tiles along a row: `Bᵀ d` down every input column
    /// the run reads, into a buffer on the stack, then `(Bᵀ d) B` across each tile's six
    /// rows of it. Neighbouring tiles share two columns, so a column is transformed once
    /// for both, and each pass keeps only its six inputs and six results live; a tile at a
    /// time, its 36 values (in two halves of 18) spilled and every load took its mask from
    /// the stack. Both passes are `input_1d`, so every value is the tile-at-a-time
    /// transform's, bit for bit. On a Zen 5 core (`winograd_breakdown_probe`, one image in
    /// cache) a 28×28 image took 2.09–2.18 µs against 2.22 over 16 channels and 4.08–4.20
    /// against 4.85 over 32; what is left is mostly the stores, 36 lines a tile into a
    /// `v` larger than L1.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transform_input(x: &[f32], l: &Layout, c: usize, v: &mut [f32]) {
        // SAFETY (whole function): the caller's checks; a pixel is read only where its row
        // and column lie inside the image (elsewhere its load is masked off entirely, which
        // suppresses any access), and every tile's positions lie inside `v`.
        unsafe {
            let (src, dst) = (x.as_ptr(), v.as_mut_ptr());
            // Consecutive positions of one tile lie `stride` floats apart in `v`.
            let stride = l.count() * c;
            let inside = |at: usize, pad: usize, size: usize| at >= pad && at - pad < size;
            let (w, c_) = (l.w as isize, c as isize);
            let mut columns = [[_mm512_setzero_ps(); IN]; COLUMNS];
            for ty in 0..l.th {
                let y0 = OUT * ty;
                // Lane masks: all sixteen where the pixel lies inside the image, none
                // outside. A masked-off load touches no memory, so an edge tile needs no
                // padded copy and no branch per pixel.
                let rows: [__mmask16; IN] = std::array::from_fn(|i| if inside(y0 + i, l.top, l.h) { !0 } else { 0 });
                for tx0 in (0..l.tw).step_by(RUN) {
                    let run = RUN.min(l.tw - tx0);
                    let x0 = OUT * tx0;
                    let corner = ((y0 as isize - l.top as isize) * w + x0 as isize - l.left as isize) * c_;
                    for c0 in (0..c).step_by(16) {
                        for (j, column) in columns[..OUT * run + 2].iter_mut().enumerate() {
                            let across: __mmask16 = if inside(x0 + j, l.left, l.w) { !0 } else { 0 };
                            let at = src.wrapping_offset(corner + j as isize * c_ + c0 as isize);
                            *column = input_1d(std::array::from_fn(|i| {
                                _mm512_maskz_loadu_ps(rows[i] & across, at.wrapping_offset(i as isize * w * c_))
                            }));
                        }
                        for r in 0..run {
                            let mut out = dst.add((ty * l.tw + tx0 + r) * c + c0);
                            for k in 0..IN {
                                for v in input_1d(std::array::from_fn(|j| columns[OUT * r + j][k])) {
                                    _mm512_storeu_ps(out, v);
                                    out = out.add(stride);
                                }
                            }
                        }
                    }
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
                    let rows = columns(src.add(t * f + f0), count * f);
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
                            let mut v = finish(px[s], b, skip, at, relu);
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

    /// [`transform_output`] with a 2×2 max pool of stride 2 in its epilogue: each 4×4 tile
    /// holds four whole windows, so a tile's outputs are pooled in registers and only the
    /// maxima and their cells are stored.
    ///
    /// # Safety
    /// AVX-512F; the caller's checks (`pool_fits`).
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments, reason = "the output transform's epilogue operands, each optional")]
    pub(super) unsafe fn transform_output_pool(
        m: &[f32],
        l: &Layout,
        f: usize,
        bias: Option<&[f32]>,
        skip: Option<&[f32]>,
        relu: bool,
        pooled: *mut f32,
        argmax: *mut i32,
    ) {
        let count = l.count();
        let pw = l.ow / 2;
        // SAFETY (whole function): the caller's checks.
        unsafe {
            let src = m.as_ptr();
            for t in 0..count {
                let (oy, ox) = (OUT * (t / l.tw), OUT * (t % l.tw));
                for f0 in (0..f).step_by(16) {
                    let rows = columns(src.add(t * f + f0), count * f);
                    let b = bias.map(|b| _mm512_loadu_ps(b.as_ptr().add(f0)));
                    for pr in 0..2 {
                        let y0 = oy + 2 * pr;
                        // The output's height is even: both rows of a window or neither.
                        if y0 >= l.oh {
                            continue;
                        }
                        let px = [output_1d(rows[2 * pr]), output_1d(rows[2 * pr + 1])];
                        for pc in 0..2 {
                            let x0 = ox + 2 * pc;
                            if x0 >= l.ow {
                                continue;
                            }
                            // The window's cells in row order, each finished as
                            // `transform_output` finishes a pixel.
                            let cells = [(0, 0), (0, 1), (1, 0), (1, 1)].map(|(dy, dx)| (y0 + dy) * l.ow + x0 + dx);
                            // A loop, not `from_fn`: a closure is compiled without AVX-512
                            // and would call `finish` instead of inlining it.
                            let mut v = [_mm512_setzero_ps(); 4];
                            for j in 0..4 {
                                v[j] = finish(px[j / 2][2 * pc + j % 2], b, skip, cells[j] * f + f0, relu);
                            }
                            let (best, at) = first_max(&v, &cells);
                            let o = ((y0 / 2) * pw + x0 / 2) * f + f0;
                            _mm512_storeu_ps(pooled.add(o), best);
                            _mm512_storeu_si512(argmax.add(o).cast(), at);
                        }
                    }
                }
            }
        }
    }

    /// The four rows of `Aᵀ m` for one tile: `Aᵀ` down each of its six columns as they are
    /// loaded (`from` its first position, positions `stride` floats apart), 24 values live,
    /// where loading the 36 positions first spilled.
    ///
    /// # Safety
    /// AVX-512F; the 36 positions are readable.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn columns(from: *const f32, stride: usize) -> [[__m512; IN]; OUT] {
        let mut rows = [[_mm512_setzero_ps(); IN]; OUT];
        for j in 0..IN {
            // SAFETY: the caller's.
            let col = output_1d(std::array::from_fn(|i| unsafe { _mm512_loadu_ps(from.add((i * IN + j) * stride)) }));
            for r in 0..OUT {
                rows[r][j] = col[r];
            }
        }
        rows
    }

    /// A transformed pixel `v` finished: plus the bias, plus the skip at `at`, then ReLU.
    ///
    /// # Safety
    /// AVX-512F; with `skip`, sixteen readable floats at `at`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn finish(mut v: __m512, bias: Option<__m512>, skip: Option<&[f32]>, at: usize, relu: bool) -> __m512 {
        if let Some(b) = bias {
            v = _mm512_add_ps(v, b);
        }
        if let Some(sk) = skip {
            // SAFETY: the caller's.
            v = _mm512_add_ps(v, unsafe { _mm512_loadu_ps(sk.as_ptr().add(at)) });
        }
        if relu {
            v = _mm512_max_ps(v, _mm512_setzero_ps());
        }
        v
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::winograd4::OUT;

    const IN: usize = OUT + 2;

    /// `Bᵀ d` as `avx512::input_1d` rounds it: each fused multiply-add rounded once.
    fn input_1d(d: [f32; IN]) -> [f32; IN] {
        let (t0, t1) = ((-4f32).mul_add(d[2], d[4]), (-4f32).mul_add(d[1], d[3]));
        let (t2, t3) = (d[4] - d[2], d[3] - d[1]);
        [
            4f32.mul_add(d[0], (-5f32).mul_add(d[2], d[4])),
            t0 + t1,
            t0 - t1,
            2f32.mul_add(t3, t2),
            (-2f32).mul_add(t3, t2),
            4f32.mul_add(d[1], (-5f32).mul_add(d[3], d[5])),
        ]
    }

    /// The input transform a tile at a time, down each column of `d` then across each row,
    /// in scalars: what the AVX-512 transform computed before it went by runs of tiles.
    fn reference(x: &[f32], l: &Layout, c: usize) -> Vec<f32> {
        let count = l.count();
        let mut v = vec![0f32; POSITIONS * count * c];
        let pixel = |y: usize, xx: usize, k: usize| {
            let inside = |at: usize, pad: usize, size: usize| at >= pad && at - pad < size;
            if inside(y, l.top, l.h) && inside(xx, l.left, l.w) {
                x[((y - l.top) * l.w + xx - l.left) * c + k]
            } else {
                0.0
            }
        };
        for t in 0..count {
            let (y0, x0) = (OUT * (t / l.tw), OUT * (t % l.tw));
            for k in 0..c {
                let columns: [[f32; IN]; IN] =
                    std::array::from_fn(|j| input_1d(std::array::from_fn(|i| pixel(y0 + i, x0 + j, k))));
                for r in 0..IN {
                    let row = input_1d(std::array::from_fn(|j| columns[j][r]));
                    for (j, value) in row.into_iter().enumerate() {
                        v[((r * IN + j) * count + t) * c + k] = value;
                    }
                }
            }
        }
        v
    }

    /// Runs of tiles, edges and padding, one and several channel blocks: every transformed
    /// value is the tile-at-a-time transform's, bit for bit.
    #[test]
    fn the_input_transform_by_runs_equals_it_tile_by_tile() {
        if !applies(16) {
            return;
        }
        // (height, width, channels, padding): 37 wide is ten tiles, a run of eight and one
        // of two.
        for (h, w, c, pad) in
            [(28, 28, 16, 1), (5, 7, 16, 1), (9, 37, 32, 1), (8, 6, 32, 0), (1, 1, 16, 1), (14, 14, 48, 1)]
        {
            let (oh, ow): (usize, usize) = (h + 2 * pad - 2, w + 2 * pad - 2);
            let l = Layout { th: oh.div_ceil(OUT), tw: ow.div_ceil(OUT), h, w, top: pad, left: pad, oh, ow };
            let x: Vec<f32> = (0..h * w * c)
                .map(|i| ((i * 7919 % 1013) as f32 * 0.37).sin() * if i % 11 == 0 { -0.0 } else { 3.0 })
                .collect();
            let mut got = vec![f32::NAN; POSITIONS * l.count() * c];
            assert!(transform_input(&x, &l, c, &mut got));
            let want = reference(&x, &l, c);
            assert!(want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "{h}x{w}x{c}, padding {pad}");
        }
    }
}
