//! Direct convolution for small patches (a first layer: one to three input channels; up to
//! a 3x3 window over 16 channels; on AVX-512, up to 576 taps, such as a strided 3x3 window
//! over 32 or 64 channels: see `applies`), where `gemm` spends more time packing and setting
//! up a product with a short inner dimension than computing. The image's patch matrix (`im2col`: a few kilobytes for such patches) is
//! multiplied by the filter with register-blocked f32 microkernels on AVX2 and FMA, and by
//! plain loops otherwise (other CPUs, f64 gradient checks).

use super::{
    buffer::{Elem, as_f32, as_f32_mut, as_f32_uninit, zeroed},
    conv::Geometry,
    microkernel::{Out, Taps, conv_f32, filter_grad_f32},
    patches::PatchIndex,
};
use engine_graph::ops::FusedActivation;

/// Patches up to this many taps (`kh * kw * channels`) are convolved directly.
pub(super) const MAX_DIRECT_PATCH: usize = 256;

/// Longer patches still convolved directly where the AVX-512 microkernels run and the
/// output channels fill their registers (in sixteens up to 16, in thirty-twos above:
/// the kernel takes 32 channels a pass). Measured per image on a Zen 5 core
/// (`winograd::tests::strided_probe`, forward / filter gradient, µs): 3×3 stride 2 over
/// 28×28, 32 → 32 channels (the ResNet's `down1`, 288 taps) 14.4 / 14.6 direct against
/// 18.2 / 19.0 with `im2col` + `gemm`; 64 → 64 over 14×14 (576 taps) 15.0 / 15.1
/// against 17.1 / 15.7; 64 → 128 29.4 / 29.7 against 33.8 / 29.4; but 48 → 48 (a
/// half-empty second pass) 43 / 44 against 36 / 37.
const MAX_DIRECT_PATCH_512: usize = 576;

/// Whether a convolution of `patch` taps into `f` channels runs directly.
pub(super) fn applies(patch: usize, f: usize) -> bool {
    patch <= MAX_DIRECT_PATCH
        || (patch <= MAX_DIRECT_PATCH_512 && (f <= 16 || f.is_multiple_of(32)) && super::simd::has_avx512())
}

/// The f32 view of an image's taps, when `E` is f32.
pub(super) fn taps_f32<'a, E: Elem>(image: &'a [E], index: &'a PatchIndex) -> Option<Taps<'a>> {
    Some(index.taps.over(as_f32(image)?))
}

/// One image: `y (pixels x f) = act(patches · w + bias)`, `w` the `k x f` filter matrix.
/// `padded` is scratch for a zero-padded copy of the image.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_image<E: Elem>(
    x: &[E],
    g: &Geometry,
    index: &PatchIndex,
    w: &[E],
    f: usize,
    bias: Option<&[E]>,
    act: FusedActivation,
    y: &mut [E],
    padded: &mut Vec<E>,
) {
    let m = g.pixels();
    let image = index.image(x, g, padded);
    let relu = act == FusedActivation::Relu;
    if microkernel(image, g, index, w, f, bias, relu, as_f32_mut(y).map(Out::dense)) {
        return;
    }
    for (p, row) in y.chunks_exact_mut(f).take(m).enumerate() {
        match bias {
            Some(b) => row.copy_from_slice(&b[..f]),
            None => row.iter_mut().for_each(|v| *v = E::zero()),
        }
        for (t, &off) in index.taps.offset().iter().enumerate() {
            let a = image[index.taps.base()[p] + off];
            row.iter_mut().zip(&w[t * f..][..f]).for_each(|(o, &wv)| *o += a * wv);
        }
        if relu {
            row.iter_mut().for_each(|v| *v = if *v > E::zero() { *v } else { E::zero() });
        }
    }
}

/// The fewest taps per output pixel for which a direct convolution writes its fresh output
/// unzeroed ([`forward_image_uninit`]). Zeroing an image's output first (`memset`, whose
/// string stores take each line without reading it) and then storing the results into
/// cache beats storing them into memory that is not in cache where the arithmetic per
/// output is short: on a Zen 5 core the ResNet's stem (9 taps, 12.8 MB out) took
/// 0.76–0.78 ms zeroed and 1.02–1.12 ms not, while `down1` (288 taps) went from 2.32–2.46
/// to 2.21–2.29 ms unzeroed, its stores hidden behind the multiply-adds.
pub(super) const UNZEROED_PATCH: usize = 64;

/// [`forward_image`] into an output that may be uninitialized, `pixels x f` long: the
/// microkernels write every element of it, so it is zeroed first only for the portable
/// loops.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_image_uninit<E: Elem>(
    x: &[E],
    g: &Geometry,
    index: &PatchIndex,
    w: &[E],
    f: usize,
    bias: Option<&[E]>,
    act: FusedActivation,
    y: &mut [std::mem::MaybeUninit<E>],
    padded: &mut Vec<E>,
) {
    let image = index.image(x, g, padded);
    let relu = act == FusedActivation::Relu;
    if microkernel(image, g, index, w, f, bias, relu, as_f32_uninit(y).map(Out::uninit)) {
        return;
    }
    forward_image(x, g, index, w, f, bias, act, zeroed(y), padded);
}

/// The image's convolution into `out` by the f32 microkernel; false, having written
/// nothing, where it does not apply (`E` is not f32, or a buffer does not fit).
#[allow(clippy::too_many_arguments)]
fn microkernel<E: Elem>(
    image: &[E],
    g: &Geometry,
    index: &PatchIndex,
    w: &[E],
    f: usize,
    bias: Option<&[E]>,
    relu: bool,
    out: Option<Out<'_>>,
) -> bool {
    let (Some(taps), Some(w), Some(out)) = (taps_f32(image, index), as_f32(w), out) else { return false };
    let init = bias.and_then(as_f32);
    (bias.is_none() || init.is_some()) && conv_f32(taps, w, init, relu, out, (g.pixels(), g.patch(), f))
}

/// One image's filter gradient, added to `acc (k x f)`: `acc += patchesᵀ · dy`.
#[allow(clippy::too_many_arguments)]
pub(super) fn filter_grad_image<E: Elem>(
    x: &[E],
    g: &Geometry,
    index: &PatchIndex,
    dy: &[E],
    f: usize,
    acc: &mut [E],
    padded: &mut Vec<E>,
) {
    let (m, k) = (g.pixels(), g.patch());
    let image = index.image(x, g, padded);
    if let (Some(taps), Some(gr), Some(out)) = (taps_f32(image, index), as_f32(dy), as_f32_mut(acc))
        && filter_grad_f32(taps, gr, out, (m, k, f))
    {
        return;
    }
    for p in 0..m {
        let row = &dy[p * f..][..f];
        for (t, &off) in index.taps.offset().iter().enumerate() {
            let a = image[index.taps.base()[p] + off];
            acc[t * f..][..f].iter_mut().zip(row).for_each(|(o, &v)| *o += a * v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(c: usize, stride: usize, pad: usize) -> Geometry {
        let (h, k) = (7, 3);
        let o = (h + 2 * pad - k) / stride + 1;
        Geometry { n: 1, h, w: h, c, kh: k, kw: k, oh: o, ow: o, sh: stride, sw: stride, top: pad, left: pad }
    }

    /// A naive convolution: the definition, for comparison.
    fn naive<E: Elem>(x: &[E], g: &Geometry, w: &[E], f: usize) -> Vec<E> {
        let mut y = vec![E::zero(); g.pixels() * f];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                for c in 0..f {
                    let mut s = E::zero();
                    for ky in 0..g.kh {
                        for kx in 0..g.kw {
                            let (iy, ix) = (
                                (oy * g.sh + ky) as isize - g.top as isize,
                                (ox * g.sw + kx) as isize - g.left as isize,
                            );
                            if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                                continue;
                            }
                            for ci in 0..g.c {
                                s += x[(iy as usize * g.w + ix as usize) * g.c + ci]
                                    * w[((ky * g.kw + kx) * g.c + ci) * f + c];
                            }
                        }
                    }
                    y[(oy * g.ow + ox) * f + c] = s;
                }
            }
        }
        y
    }

    fn check<E: Elem + std::fmt::Debug>(tolerance: E) {
        for (c, stride, pad, f) in [
            (1, 1, 0, 32),
            (3, 2, 1, 19),
            (2, 1, 1, 5),
            (1, 1, 1, 40),
            (1, 1, 0, 16),
            (16, 1, 1, 16),
            (1, 1, 1, 10),
            (1, 2, 1, 16),
            (32, 2, 1, 32),
            (64, 2, 0, 64),
        ] {
            let g = geometry(c, stride, pad);
            let value = |i: usize, m: usize, s: usize| {
                E::from((i * m) % s).unwrap_or(E::zero()) - E::from(s / 2).unwrap_or(E::zero())
            };
            let x: Vec<E> = (0..g.image()).map(|i| value(i, 37, 11)).collect();
            let w: Vec<E> = (0..g.patch() * f).map(|i| value(i, 13, 7)).collect();
            let mut y = vec![E::zero(); g.pixels() * f];
            let index = PatchIndex::new(&g);
            forward_image(&x, &g, &index, &w, f, None, FusedActivation::Linear, &mut y, &mut Vec::new());
            let want = naive(&x, &g, &w, f);
            assert!(
                y.iter().zip(&want).all(|(a, b)| (*a - *b).abs() <= tolerance),
                "c={c} stride={stride} pad={pad} f={f}"
            );
            // <dW, W'> = <dy, conv(x, W')>: the gradient is the adjoint of the forward map.
            let dy: Vec<E> = (0..g.pixels() * f).map(|i| value(i, 29, 9)).collect();
            let mut dw = vec![E::zero(); g.patch() * f];
            filter_grad_image(&x, &g, &index, &dy, f, &mut dw, &mut Vec::new());
            let probe: Vec<E> = (0..g.patch() * f).map(|i| value(i, 3, 5)).collect();
            let lhs = dw.iter().zip(&probe).fold(E::zero(), |s, (a, b)| s + *a * *b);
            let rhs = dy.iter().zip(naive(&x, &g, &probe, f)).fold(E::zero(), |s, (a, b)| s + *a * b);
            assert!((lhs - rhs).abs() <= tolerance * lhs.abs().max(E::one()), "c={c} stride={stride} pad={pad} f={f}");
        }
    }

    #[test]
    fn direct_convolution_and_its_filter_gradient_match_the_definition() {
        // f32 runs the SIMD microkernels (on a CPU with AVX2), f64 the portable loops; the
        // values are small integers, so both are exact.
        check::<f32>(0.0);
        check::<f64>(0.0);
    }

    #[test]
    #[ignore = "timing probe"]
    fn direct_probe() {
        let g = Geometry { n: 64, h: 28, w: 28, c: 1, kh: 3, kw: 3, oh: 26, ow: 26, sh: 1, sw: 1, top: 0, left: 0 };
        let x: Vec<f32> = (0..784).map(|i| (i % 17) as f32).collect();
        let w: Vec<f32> = (0..9 * 32).map(|i| (i % 5) as f32).collect();
        let bias = vec![0.5f32; 32];
        let mut y = vec![0.0f32; 676 * 32];
        let mut dw = vec![0.0f32; 9 * 32];
        let mut padded = Vec::new();
        let index = PatchIndex::new(&g);
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..64 {
                forward_image(&x, &g, &index, &w, 32, Some(&bias), FusedActivation::Relu, &mut y, &mut padded);
            }
            let fwd = t.elapsed();
            let t = std::time::Instant::now();
            for _ in 0..64 {
                filter_grad_image(&x, &g, &index, &y, 32, &mut dw, &mut padded);
            }
            println!("direct forward {fwd:?} filter grad {:?} (64 images)", t.elapsed());
        }
    }
}
