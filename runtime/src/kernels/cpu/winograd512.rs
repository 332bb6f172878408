//! Winograd's three tile transforms (see `winograd`) on sixteen-channel AVX-512 registers,
//! for channel counts in sixteens. Each 4×4 tile is sixteen registers, transformed in
//! place, so a tile costs 16 loads, 32 additions and 16 stores per sixteen channels. The
//! portable loops, which run over slices of channels with a scratch tile between the two
//! passes, cost as much as the products themselves at 16 channels (measured with
//! `winograd_probe`: 28×28, 16 → 16, 25.6 µs per image against 21.1 for the direct
//! convolution).
//!
//! The additions are the portable loops', in their order, so the results are bit for bit
//! theirs (tested in `winograd`). The output transform also adds the bias and applies ReLU,
//! as `elementwise::bias_activation` would in a pass of its own.
//!
//! Every function returns false, having done nothing, where it does not apply (no AVX-512,
//! channels not in sixteens, or a buffer too short), and the portable loops run instead.

#![cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]

use super::winograd::TILE;

/// Whether the transforms run here for `c` channels: AVX-512F and whole registers.
pub(super) fn applies(c: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    return c > 0 && c.is_multiple_of(16) && super::simd::has_avx512();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The tiling of one image, as `winograd` lays it out.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    /// Tiles down and across.
    pub th: usize,
    pub tw: usize,
    /// The input's height and width, and its padding above and to the left: tile
    /// `(ty, tx)` reads rows `2 ty - top ..` and columns `2 tx - left ..`, zeros outside.
    pub h: usize,
    pub w: usize,
    pub top: usize,
    pub left: usize,
    /// Output height and width (tiles past them are cut).
    pub oh: usize,
    pub ow: usize,
}

impl Layout {
    pub(super) fn count(&self) -> usize {
        self.th * self.tw
    }
}

/// `v` (16 `tiles x c` matrices, one per position `(i, j)`) = `Bᵀ d B` of every 4×4
/// block `d` of the image `x` (`h x w x c`) zero-padded, whose corner is at
/// `(2 ty - top, 2 tx - left)`. The padding is never built: pixels outside read as zeros.
pub(super) fn transform_input(x: &[f32], l: &Layout, c: usize, v: &mut [f32]) -> bool {
    if !applies(c) || x.len() < l.h * l.w * c || v.len() < l.count() * TILE * c {
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

/// `y` = `Aᵀ m A` of every tile (`m`: 16 `tiles x f` matrices), plus `bias`, then ReLU if
/// `relu`; pixels past the output's edge are dropped.
pub(super) fn transform_output(
    m: &[f32],
    l: &Layout,
    f: usize,
    bias: Option<&[f32]>,
    relu: bool,
    y: &mut [f32],
) -> bool {
    if !output_fits(l, f, y.len(), m.len(), bias.map(<[f32]>::len)) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as above; pixels are stored only inside `oh x ow`.
    unsafe {
        avx512::transform_output(m, l, f, bias, relu, y)
    };
    true
}

/// Whether the output transforms run for `f` channels with an output (or output gradient)
/// of `image` floats, transformed tiles of `tiles` floats and a bias of `bias` floats: the
/// tiles cover the output and every buffer holds what they touch.
fn output_fits(l: &Layout, f: usize, image: usize, tiles: usize, bias: Option<usize>) -> bool {
    applies(f)
        && image >= l.oh * l.ow * f
        && tiles >= TILE * l.count() * f
        && l.oh <= 2 * l.th
        && l.ow <= 2 * l.tw
        && bias.is_none_or(|b| b >= f)
}

/// `e` (16 `tiles x f` matrices) = `A ∂y Aᵀ` of every 2×2 block of `dy`, zeros past its
/// edge: the adjoint of `transform_output`. With `bias`, `dy`'s pixels are also added to
/// it (the bias gradient), each read once for both.
pub(super) fn transform_output_grad(dy: &[f32], l: &Layout, f: usize, e: &mut [f32], bias: Option<&mut [f32]>) -> bool {
    if !output_fits(l, f, dy.len(), e.len(), bias.as_ref().map(|b| b.len())) {
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

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transform_input(x: &[f32], l: &Layout, c: usize, v: &mut [f32]) {
        // SAFETY (whole function): the caller's checks; a pixel is read only where its row
        // and column lie inside the image.
        unsafe {
            let (src, dst) = (x.as_ptr(), v.as_mut_ptr());
            let inside = |at: usize, pad: usize, size: usize| at >= pad && at - pad < size;
            let count = l.count();
            for t in 0..count {
                let (y0, x0) = (2 * (t / l.tw), 2 * (t % l.tw));
                let rows: [bool; 4] = std::array::from_fn(|i| inside(y0 + i, l.top, l.h));
                let cols: [bool; 4] = std::array::from_fn(|j| inside(x0 + j, l.left, l.w));
                let interior = rows.iter().chain(&cols).all(|&v| v);
                for c0 in (0..c).step_by(16) {
                    let mut d = [[_mm512_setzero_ps(); 4]; 4];
                    if interior {
                        let corner = src.add(((y0 - l.top) * l.w + x0 - l.left) * c + c0);
                        for i in 0..4 {
                            for j in 0..4 {
                                d[i][j] = _mm512_loadu_ps(corner.add((i * l.w + j) * c));
                            }
                        }
                    } else {
                        for i in 0..4 {
                            for j in 0..4 {
                                if rows[i] && cols[j] {
                                    let at = ((y0 + i - l.top) * l.w + x0 + j - l.left) * c + c0;
                                    d[i][j] = _mm512_loadu_ps(src.add(at));
                                }
                            }
                        }
                    }
                    // Columns first, then rows: `Bᵀ (d0, d1, d2, d3) = (d0 - d2, d1 + d2,
                    // d2 - d1, d1 - d3)`.
                    let mut tmp = [[_mm512_setzero_ps(); 4]; 4];
                    for j in 0..4 {
                        let col = input_1d([d[0][j], d[1][j], d[2][j], d[3][j]]);
                        for i in 0..4 {
                            tmp[i][j] = col[i];
                        }
                    }
                    for i in 0..4 {
                        let row = input_1d(tmp[i]);
                        for j in 0..4 {
                            _mm512_storeu_ps(dst.add(((i * 4 + j) * count + t) * c + c0), row[j]);
                        }
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn input_1d(d: [__m512; 4]) -> [__m512; 4] {
        [_mm512_sub_ps(d[0], d[2]), _mm512_add_ps(d[1], d[2]), _mm512_sub_ps(d[2], d[1]), _mm512_sub_ps(d[1], d[3])]
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transform_output(
        m: &[f32],
        l: &Layout,
        f: usize,
        bias: Option<&[f32]>,
        relu: bool,
        y: &mut [f32],
    ) {
        let count = l.count();
        // SAFETY (whole function): the caller's checks.
        unsafe {
            let (src, dst) = (m.as_ptr(), y.as_mut_ptr());
            for t in 0..count {
                let (oy, ox) = (2 * (t / l.tw), 2 * (t % l.tw));
                for f0 in (0..f).step_by(16) {
                    let at = |xi: usize| _mm512_loadu_ps(src.add((xi * count + t) * f + f0));
                    // `Aᵀ (m0, m1, m2, m3) = (m0 + m1 + m2, m1 - m2 - m3)` down each column,
                    // then across each of the two rows.
                    let mut rows = [[_mm512_setzero_ps(); 4]; 2];
                    for j in 0..4 {
                        let [a, b] = output_1d([at(j), at(4 + j), at(8 + j), at(12 + j)]);
                        rows[0][j] = a;
                        rows[1][j] = b;
                    }
                    let b = bias.map(|b| _mm512_loadu_ps(b.as_ptr().add(f0)));
                    for r in 0..2 {
                        if oy + r >= l.oh {
                            continue;
                        }
                        let px = output_1d(rows[r]);
                        for s in 0..2 {
                            if ox + s >= l.ow {
                                continue;
                            }
                            let mut v = px[s];
                            if let Some(b) = b {
                                v = _mm512_add_ps(v, b);
                            }
                            if relu {
                                v = _mm512_max_ps(v, _mm512_setzero_ps());
                            }
                            _mm512_storeu_ps(dst.add(((oy + r) * l.ow + ox + s) * f + f0), v);
                        }
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn output_1d(m: [__m512; 4]) -> [__m512; 2] {
        [_mm512_add_ps(_mm512_add_ps(m[0], m[1]), m[2]), _mm512_sub_ps(_mm512_sub_ps(m[1], m[2]), m[3])]
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
                    let (oy, ox) = (2 * (t / l.tw), 2 * (t % l.tw));
                    let at = |r: usize, s: usize| {
                        if oy + r < l.oh && ox + s < l.ow {
                            _mm512_loadu_ps(src.add(((oy + r) * l.ow + ox + s) * f + f0))
                        } else {
                            _mm512_setzero_ps()
                        }
                    };
                    let d = [[at(0, 0), at(0, 1)], [at(1, 0), at(1, 1)]];
                    if bias.is_some() {
                        let tile = _mm512_add_ps(_mm512_add_ps(d[0][0], d[0][1]), _mm512_add_ps(d[1][0], d[1][1]));
                        sum = _mm512_add_ps(sum, tile);
                    }
                    // `A (a, b) = (a, a + b, a - b, -b)` down each column, then across
                    // each of the four rows.
                    let cols = [grad_1d(d[0][0], d[1][0]), grad_1d(d[0][1], d[1][1])];
                    for i in 0..4 {
                        let row = grad_1d(cols[0][i], cols[1][i]);
                        for j in 0..4 {
                            _mm512_storeu_ps(dst.add(((i * 4 + j) * count + t) * f + f0), row[j]);
                        }
                    }
                }
                if let Some(b) = bias {
                    _mm512_storeu_ps(b.add(f0), _mm512_add_ps(_mm512_loadu_ps(b.add(f0)), sum));
                }
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn grad_1d(a: __m512, b: __m512) -> [__m512; 4] {
        // `-b` flips the sign bit, as the portable loop's negation does (`0 - b` would
        // turn -0 into +0).
        let minus_b = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(b), _mm512_set1_epi32(i32::MIN)));
        [a, _mm512_add_ps(a, b), _mm512_sub_ps(a, b), minus_b]
    }
}
