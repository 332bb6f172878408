//! Winograd's three tile transforms (see `winograd`) on sixteen-channel AVX-512 registers,
//! for channel counts in sixteens, or on eight-channel AVX2 registers for channel counts
//! in eights. Each 4×4 tile is sixteen registers, transformed in place, so a tile costs 16
//! loads, 32 additions and 16 stores per register of channels. The
//! portable loops, which run over slices of channels with a scratch tile between the two
//! passes, cost as much as the products themselves at 16 channels (measured with
//! `winograd_probe`: 28×28, 16 → 16, 25.6 µs per image against 21.1 for the direct
//! convolution).
//!
//! The additions are the portable loops', in their order, so the results are bit for bit
//! theirs (tested in `winograd`). The output transform also adds the bias and applies ReLU,
//! as `elementwise::bias_activation` would in a pass of its own.
//!
//! The AVX2 width: on a Zen 3 core the portable input transform and its copies (a
//! `memcpy` call per tile position and channel slice, and the padded image built first)
//! took about a sixth of the ResNet's step.
//!
//! Every function returns false, having done nothing, where it does not apply (neither
//! width's instructions, channels in neither width's lanes, or a buffer too short), and the
//! portable loops run instead.

#![cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]

use super::winograd::TILE;

/// Whether the AVX-512 transforms run here for `c` channels: AVX-512F and whole
/// registers. What the choices of algorithm ask (F(2×2) from 16 channels, F(4×4) at all).
pub(super) fn applies(c: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    return c > 0 && c.is_multiple_of(16) && super::simd::has_avx512();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A register width the transforms are built for (the `transforms!` modules below).
#[derive(Clone, Copy)]
enum Width {
    Avx512,
    Avx2,
}

/// The register width the transforms run at for `c` channels: AVX-512's sixteen floats
/// where it applies, else AVX2's eight for channels in eights. None: the portable loops.
fn width(c: usize) -> Option<Width> {
    if applies(c) {
        return Some(Width::Avx512);
    }
    #[cfg(target_arch = "x86_64")]
    if c > 0 && c.is_multiple_of(8) && super::simd::has_avx2() {
        return Some(Width::Avx2);
    }
    None
}

/// Whether the transforms run here for `c` channels, at either width.
#[cfg(test)]
pub(super) fn runs(c: usize) -> bool {
    width(c).is_some()
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
    let Some(width) = width(c) else { return false };
    if x.len() < l.h * l.w * c || v.len() < l.count() * TILE * c {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the width's instructions are present and c is a multiple of its lanes; only
    // pixels inside `h x w` are read, and every tile's transform lies in `v` (checked above).
    unsafe {
        match width {
            Width::Avx512 => avx512::transform_input(x, l, c, v),
            Width::Avx2 => avx2::transform_input(x, l, c, v),
        }
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
    let Some(width) = width(f) else { return false };
    if !output_fits(l, f, y.len(), m.len(), bias.map(<[f32]>::len)) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as above; pixels are stored only inside `oh x ow`.
    unsafe {
        match width {
            Width::Avx512 => avx512::transform_output(m, l, f, bias, relu, y),
            Width::Avx2 => avx2::transform_output(m, l, f, bias, relu, y),
        }
    };
    true
}

/// Whether the output transforms run for `f` channels with an output (or output gradient)
/// of `image` floats, transformed tiles of `tiles` floats and a bias of `bias` floats: the
/// tiles cover the output and every buffer holds what they touch.
fn output_fits(l: &Layout, f: usize, image: usize, tiles: usize, bias: Option<usize>) -> bool {
    image >= l.oh * l.ow * f
        && tiles >= TILE * l.count() * f
        && l.oh <= 2 * l.th
        && l.ow <= 2 * l.tw
        && bias.is_none_or(|b| b >= f)
}

/// `e` (16 `tiles x f` matrices) = `A ∂y Aᵀ` of every 2×2 block of `dy`, zeros past its
/// edge: the adjoint of `transform_output`. With `bias`, `dy`'s pixels are also added to
/// it (the bias gradient), each read once for both.
pub(super) fn transform_output_grad(dy: &[f32], l: &Layout, f: usize, e: &mut [f32], bias: Option<&mut [f32]>) -> bool {
    let Some(width) = width(f) else { return false };
    if !output_fits(l, f, dy.len(), e.len(), bias.as_ref().map(|b| b.len())) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as above; pixels are read only inside `oh x ow`.
    unsafe {
        match width {
            Width::Avx512 => avx512::transform_output_grad(dy, l, f, e, bias),
            Width::Avx2 => avx2::transform_output_grad(dy, l, f, e, bias),
        }
    };
    true
}

/// The three transforms on one register width: `$v` holds `$lanes` floats, `$feature` is
/// what its instructions need, and the rest name its intrinsics (`$neg` flips the sign
/// bit). One body for AVX-512 and AVX2, so both keep the portable loops' order of additions.
#[cfg(target_arch = "x86_64")]
macro_rules! transforms {
    ($module:ident, $feature:literal, $v:ty, $lanes:literal, $loadu:ident, $storeu:ident, $add:ident, $sub:ident,
     $max:ident, $setzero:ident, $neg:path) => {
        // Indexed loops over constant bounds are how the register arrays stay registers.
        #[allow(clippy::needless_range_loop)]
        mod $module {
            use super::Layout;
            use std::arch::x86_64::*;
            #[target_feature(enable = $feature)]
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
                        for c0 in (0..c).step_by($lanes) {
                            let mut d = [[$setzero(); 4]; 4];
                            if interior {
                                let corner = src.add(((y0 - l.top) * l.w + x0 - l.left) * c + c0);
                                for i in 0..4 {
                                    for j in 0..4 {
                                        d[i][j] = $loadu(corner.add((i * l.w + j) * c));
                                    }
                                }
                            } else {
                                for i in 0..4 {
                                    for j in 0..4 {
                                        if rows[i] && cols[j] {
                                            let at = ((y0 + i - l.top) * l.w + x0 + j - l.left) * c + c0;
                                            d[i][j] = $loadu(src.add(at));
                                        }
                                    }
                                }
                            }
                            // Columns first, then rows: `Bᵀ (d0, d1, d2, d3) = (d0 - d2, d1 + d2,
                            // d2 - d1, d1 - d3)`.
                            let mut tmp = [[$setzero(); 4]; 4];
                            for j in 0..4 {
                                let col = input_1d([d[0][j], d[1][j], d[2][j], d[3][j]]);
                                for i in 0..4 {
                                    tmp[i][j] = col[i];
                                }
                            }
                            for i in 0..4 {
                                let row = input_1d(tmp[i]);
                                for j in 0..4 {
                                    $storeu(dst.add(((i * 4 + j) * count + t) * c + c0), row[j]);
                                }
                            }
                        }
                    }
                }
            }

            #[target_feature(enable = $feature)]
            #[inline]
            fn input_1d(d: [$v; 4]) -> [$v; 4] {
                [$sub(d[0], d[2]), $add(d[1], d[2]), $sub(d[2], d[1]), $sub(d[1], d[3])]
            }

            #[target_feature(enable = $feature)]
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
                        for f0 in (0..f).step_by($lanes) {
                            let at = |xi: usize| $loadu(src.add((xi * count + t) * f + f0));
                            // `Aᵀ (m0, m1, m2, m3) = (m0 + m1 + m2, m1 - m2 - m3)` down each column,
                            // then across each of the two rows.
                            let mut rows = [[$setzero(); 4]; 2];
                            for j in 0..4 {
                                let [a, b] = output_1d([at(j), at(4 + j), at(8 + j), at(12 + j)]);
                                rows[0][j] = a;
                                rows[1][j] = b;
                            }
                            let b = bias.map(|b| $loadu(b.as_ptr().add(f0)));
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
                                        v = $add(v, b);
                                    }
                                    if relu {
                                        v = $max(v, $setzero());
                                    }
                                    $storeu(dst.add(((oy + r) * l.ow + ox + s) * f + f0), v);
                                }
                            }
                        }
                    }
                }
            }

            #[target_feature(enable = $feature)]
            #[inline]
            fn output_1d(m: [$v; 4]) -> [$v; 2] {
                [$add($add(m[0], m[1]), m[2]), $sub($sub(m[1], m[2]), m[3])]
            }

            #[target_feature(enable = $feature)]
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
                    for f0 in (0..f).step_by($lanes) {
                        // Every pixel lies in exactly one tile: the bias gradient is the sum of the
                        // tiles' pixels, kept in a register while `e` is built.
                        let mut sum = $setzero();
                        for t in 0..count {
                            let (oy, ox) = (2 * (t / l.tw), 2 * (t % l.tw));
                            let at = |r: usize, s: usize| {
                                if oy + r < l.oh && ox + s < l.ow {
                                    $loadu(src.add(((oy + r) * l.ow + ox + s) * f + f0))
                                } else {
                                    $setzero()
                                }
                            };
                            let d = [[at(0, 0), at(0, 1)], [at(1, 0), at(1, 1)]];
                            if bias.is_some() {
                                let tile = $add($add(d[0][0], d[0][1]), $add(d[1][0], d[1][1]));
                                sum = $add(sum, tile);
                            }
                            // `A (a, b) = (a, a + b, a - b, -b)` down each column, then across
                            // each of the four rows.
                            let cols = [grad_1d(d[0][0], d[1][0]), grad_1d(d[0][1], d[1][1])];
                            for i in 0..4 {
                                let row = grad_1d(cols[0][i], cols[1][i]);
                                for j in 0..4 {
                                    $storeu(dst.add(((i * 4 + j) * count + t) * f + f0), row[j]);
                                }
                            }
                        }
                        if let Some(b) = bias {
                            $storeu(b.add(f0), $add($loadu(b.add(f0)), sum));
                        }
                    }
                }
            }

            #[target_feature(enable = $feature)]
            #[inline]
            fn grad_1d(a: $v, b: $v) -> [$v; 4] {
                // `-b` flips the sign bit, as the portable loop's negation does (`0 - b` would
                // turn -0 into +0).
                [a, $add(a, b), $sub(a, b), $neg(b)]
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
transforms!(
    avx512,
    "avx512f",
    __m512,
    16,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_add_ps,
    _mm512_sub_ps,
    _mm512_max_ps,
    _mm512_setzero_ps,
    super::neg512
);

#[cfg(target_arch = "x86_64")]
transforms!(
    avx2,
    "avx2",
    __m256,
    8,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_add_ps,
    _mm256_sub_ps,
    _mm256_max_ps,
    _mm256_setzero_ps,
    super::neg256
);

/// `-b` on sixteen lanes: AVX-512F has no float `xor` (that is AVX-512DQ's), so through integers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn neg512(b: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(b), _mm512_set1_epi32(i32::MIN)))
}

/// `-b` on eight lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn neg256(b: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    _mm256_xor_ps(b, _mm256_set1_ps(-0.0))
}
