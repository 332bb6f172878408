//! The input gradient of a strided convolution, one phase at a time. With stride `s`, the
//! input pixels split into `s × s` phases by their position modulo the stride, and each
//! phase receives the output gradient through a fixed subset of the filter's taps (of a
//! 3×3 filter at stride 2: 2×2, 2×1, 1×2 and 1×1 taps). So each phase is a small
//! stride-1 convolution of the output gradient, computed by the direct microkernels and
//! written once into its pixels, where `im2col`'s adjoint multiplied every output pixel by
//! the whole filter (`gemm` with the output channels as its short inner dimension) and
//! added the patches back onto the image (`col2im`) over a zeroed gradient.
//!
//! Each input pixel sums its taps and channels in one chain (the phase's taps, then the
//! output channels), so the result is rounded differently from the `col2im` sum of
//! per-tap partial products, within a few ulps of it.

use super::{
    buffer::{Elem, as_f32},
    conv::Geometry,
    microkernel::{Out, RowIndex, TapIndex, conv_f32},
};

/// The pixels of one phase and how they read the padded output gradient.
struct Phase {
    /// Where each pixel's channels start in the image's gradient (`(iy * w + ix) * c`), in
    /// the order of `index`: the microkernel writes the phase's rows there.
    pixels: RowIndex,
    /// Tap `(j, i, channel)` of pixel `p`: the padded output gradient's element
    /// `base[p] + offset[t]`.
    index: TapIndex,
    /// The phase's filter, `taps x c` (its taps' rows of the transposed filter).
    w: Vec<f32>,
    taps: usize,
}

/// The phases of one strided convolution's input gradient, built once per call.
pub(super) struct Phases {
    phases: Vec<Phase>,
    /// The output gradient zero-padded to `ph x pw` pixels, `top` and `left` of them
    /// before its first row and column.
    ph: usize,
    pw: usize,
    top: usize,
    left: usize,
    f: usize,
}

/// Kernel taps `k0, k0 + s, ...` below `k`: how many there are.
fn taps_of(k0: usize, k: usize, s: usize) -> usize {
    if k0 >= k { 0 } else { (k - k0).div_ceil(s) }
}

impl Phases {
    /// The phases of `g`'s input gradient for the HWIO filter `w` of `f` output channels.
    /// None where the direct microkernels do not take them (see `direct_conv::applies`).
    pub(super) fn new(g: &Geometry, w: &[f32], f: usize) -> Option<Phases> {
        let (sh, sw) = (g.sh, g.sw);
        let shaped = sh > 0 && sw > 0 && sh * sw > 1 && g.h > 0 && g.w > 0 && g.oh > 0 && g.ow > 0;
        if !shaped || w.len() < g.kh * g.kw * g.c * f || !super::simd::has_avx2() {
            return None;
        }
        let (most_y, most_x) = (taps_of(0, g.kh, sh), taps_of(0, g.kw, sw));
        let widest = most_y * most_x * f;
        if widest == 0 || !super::direct_conv::applies(widest, g.c) {
            return None;
        }
        // Output rows `A - taps + 1 ..= A` feed an input row whose phase row is `A`; the
        // padding covers the rows above the first and below the last.
        let (top, left) = (most_y - 1, most_x - 1);
        let last_y = (g.h - 1 + g.top) / sh;
        let last_x = (g.w - 1 + g.left) / sw;
        let (ph, pw) = (top + g.oh.max(last_y + 1), left + g.ow.max(last_x + 1));
        let mut phases = Vec::with_capacity(sh * sw);
        for ry in 0..sh {
            for rx in 0..sw {
                let (ty, tx) = (taps_of(ry, g.kh, sh), taps_of(rx, g.kw, sw));
                let (mut pixels, mut base) = (Vec::new(), Vec::new());
                for iy in (0..g.h).filter(|iy| (iy + g.top) % sh == ry) {
                    for ix in (0..g.w).filter(|ix| (ix + g.left) % sw == rx) {
                        pixels.push((iy * g.w + ix) * g.c);
                        // The first tap row is `A - ty + 1`, which the padding keeps >= 0.
                        let (a, b) = ((iy + g.top - ry) / sh, (ix + g.left - rx) / sw);
                        let (y0, x0) = ((a + top + 1).saturating_sub(ty), (b + left + 1).saturating_sub(tx));
                        base.push((y0 * pw + x0) * f);
                    }
                }
                let mut offset = Vec::with_capacity(ty * tx * f);
                let mut filter = Vec::with_capacity(ty * tx * f * g.c);
                for j in 0..ty {
                    for i in 0..tx {
                        // Row `j` of the window is output row `A - (ty - 1 - j)`, which the
                        // filter reaches through tap `ry + (ty - 1 - j) * sh`.
                        let (ky, kx) = (ry + (ty - 1 - j) * sh, rx + (tx - 1 - i) * sw);
                        for fi in 0..f {
                            offset.push((j * pw + i) * f + fi);
                            for c in 0..g.c {
                                filter.push(w[((ky * g.kw + kx) * g.c + c) * f + fi]);
                            }
                        }
                    }
                }
                phases.push(Phase {
                    pixels: RowIndex::new(pixels),
                    index: TapIndex::new(base, offset),
                    w: filter,
                    taps: ty * tx * f,
                });
            }
        }
        Some(Phases { phases, ph, pw, top, left, f })
    }

    /// One image: `dx` (`h x w x c`) from `dy` (`oh x ow x f`). The phases partition the
    /// image, so every element of `dx` is written once and none is read: it may be
    /// uninitialized. Each phase's product writes its pixels' rows of `dx` directly.
    /// `scratch` holds the padded output gradient. False, with `dx` not wholly written, if
    /// a buffer does not fit.
    pub(super) fn image(
        &self,
        dy: &[f32],
        g: &Geometry,
        dx: &mut [std::mem::MaybeUninit<f32>],
        scratch: &mut Vec<f32>,
    ) -> bool {
        let (f, c) = (self.f, g.c);
        if dy.len() < g.oh * g.ow * f || dx.len() < g.image() {
            return false;
        }
        let padded = super::buffer::line_aligned(scratch, self.ph * self.pw * f);
        padded.fill(0.0);
        for oy in 0..g.oh {
            let row = &dy[oy * g.ow * f..][..g.ow * f];
            padded[((oy + self.top) * self.pw + self.left) * f..][..g.ow * f].copy_from_slice(row);
        }
        for phase in &self.phases {
            if phase.taps == 0 {
                // No tap reaches these pixels: their gradient is zero.
                for &at in phase.pixels.at() {
                    let Some(pixel) = dx.get_mut(at..at + c) else { return false };
                    pixel.iter_mut().for_each(|d| {
                        d.write(0.0);
                    });
                }
            } else {
                let out = Out::scattered(dx, &phase.pixels);
                if !conv_f32(
                    phase.index.over(padded),
                    &phase.w,
                    None,
                    false,
                    out,
                    (phase.pixels.at().len(), phase.taps, c),
                ) {
                    return false;
                }
            }
        }
        true
    }
}

/// `Phases` for `E` = f32 only: the microkernels are f32.
pub(super) fn phases_for<E: Elem>(g: &Geometry, w: &[E], f: usize) -> Option<Phases> {
    Phases::new(g, as_f32(w)?, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The input gradient by its definition, in f64: each input pixel sums every output
    /// pixel and tap that read it.
    fn naive(g: &Geometry, w: &[f32], dy: &[f32], f: usize) -> Vec<f64> {
        let mut dx = vec![0f64; g.image()];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                for ky in 0..g.kh {
                    for kx in 0..g.kw {
                        let (iy, ix) =
                            ((oy * g.sh + ky) as isize - g.top as isize, (ox * g.sw + kx) as isize - g.left as isize);
                        if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                            continue;
                        }
                        for c in 0..g.c {
                            for fi in 0..f {
                                dx[(iy as usize * g.w + ix as usize) * g.c + c] +=
                                    f64::from(dy[(oy * g.ow + ox) * f + fi])
                                        * f64::from(w[((ky * g.kw + kx) * g.c + c) * f + fi]);
                            }
                        }
                    }
                }
            }
        }
        dx
    }

    /// Every phase, with taps and without (a 1×1 filter at stride 2 reaches one pixel in
    /// four), padded above and below, at strides 2 and 3: within a few ulps of the
    /// definition, and every element written (the output starts as NaN).
    #[test]
    fn phases_equal_the_definition() {
        if !crate::kernels::cpu::simd::has_avx2() {
            return;
        }
        // (h, w, c, f, kh, kw, stride, top, left, oh, ow)
        for (h, w, c, f, kh, kw, s, top, left, oh, ow) in [
            (28, 28, 32, 32, 3, 3, 2, 0, 0, 14, 14),
            (14, 14, 32, 64, 3, 3, 2, 0, 0, 7, 7),
            (9, 7, 16, 8, 3, 3, 2, 1, 1, 5, 4),
            (14, 14, 32, 64, 1, 1, 2, 0, 0, 7, 7),
            (10, 11, 5, 3, 2, 2, 2, 0, 0, 5, 5),
            (11, 11, 3, 16, 3, 3, 3, 1, 0, 4, 4),
        ] {
            let g = Geometry { n: 1, h, w, c, kh, kw, oh, ow, sh: s, sw: s, top, left };
            let value = |i: usize, m: usize| ((i * m) % 23) as f32 / 11.0 - 1.0;
            let wt: Vec<f32> = (0..kh * kw * c * f).map(|i| value(i, 7)).collect();
            let dy: Vec<f32> = (0..oh * ow * f).map(|i| value(i, 13)).collect();
            let phases = Phases::new(&g, &wt, f).expect("the phases apply");
            let mut dx = vec![std::mem::MaybeUninit::new(f32::NAN); g.image()];
            assert!(phases.image(&dy, &g, &mut dx, &mut Vec::new()));
            let want = naive(&g, &wt, &dy, f);
            let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (i, (got, want)) in dx.iter().zip(&want).enumerate() {
                // SAFETY: the output started initialized (NaN).
                let got = f64::from(unsafe { got.assume_init() });
                assert!(
                    (got - want).abs() <= 1e-6 * scale,
                    "{h}x{w} {c}->{f} {kh}x{kw}/{s}: element {i} {got} vs {want}"
                );
            }
        }
    }
}
