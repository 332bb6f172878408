//! Max pooling's backward (`pool::unpool_image` and `pool::scatter_image`) on
//! sixteen-channel AVX-512 registers: each pooled gradient is added to the window cell its
//! argmax names, by comparing the argmax of sixteen channels with each cell of the window
//! and adding under that mask. The portable loops scatter one channel at a time through an
//! index; profiled on the residual model, that was `MaxPoolGrad`'s 0.65 ms per step.
//!
//! The gradients are added in the portable loop's order (window after window), so
//! overlapping windows sum bit for bit as it does. An argmax outside its own window names
//! no cell here and is dropped; the pooling forward only ever writes cells of the window.

use super::pool::Plane;

/// Which gradients the ReLU that fed the pooling drops.
#[derive(Clone, Copy)]
pub(super) enum Relu<'a> {
    /// None: no ReLU.
    None,
    /// Those whose pooled value (`pooled x c`) is not positive (`MaxPoolGradWithArgmax`).
    Pooled(&'a [f32]),
    /// Those whose input at the argmax cell (`h x w x c`) is not positive (`MaxPoolGrad`).
    Input(&'a [f32]),
}

/// Adds `dy` (one pooled image) into `dx` (one input image) at the argmax cells `a`,
/// dropping what `relu` drops. False, having done nothing, where it does not apply: no
/// AVX-512, channels not in sixteens, or a buffer shorter than the plane.
pub(super) fn unpool_f32(dx: &mut [f32], a: &[i32], dy: &[f32], pl: &Plane, relu: Relu<'_>) -> bool {
    if !applies(dx.len(), a, dy, pl, relu) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: AVX-512F is present; the slices hold the plane (checked above); cells
        // come from `pl.cells`, inside the image.
        unsafe { avx512::unpool::<false>(dx.as_mut_ptr(), a, dy, pl, relu) };
        return true;
    }
    false
}

/// [`unpool_f32`] where the windows tile the plane (`Plane::tiles`), into an unwritten
/// `dx`: each cell of each window is stored once, the gradient where the argmax names it
/// (and `relu` keeps it), else zero. The same values as zeroing and adding (one gradient
/// per cell at most, added to zero), with no zeroing pass and no load before each store.
/// False, having written nothing, where it does not apply.
pub(super) fn unpool_tiled_f32(
    dx: &mut [std::mem::MaybeUninit<f32>],
    a: &[i32],
    dy: &[f32],
    pl: &Plane,
    relu: Relu<'_>,
) -> bool {
    // The input's mask needs the input at the argmax cell, which only the scatter reads.
    if matches!(relu, Relu::Input(_)) || !pl.tiles() || !applies(dx.len(), a, dy, pl, relu) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx512() {
        // SAFETY: AVX-512F is present; the slices hold the plane (checked above); cells
        // come from `pl.cells`, inside the image.
        unsafe { avx512::unpool::<true>(dx.as_mut_ptr().cast::<f32>(), a, dy, pl, relu) };
        return true;
    }
    false
}

/// Whether the sixteen-channel kernels apply: every buffer holds the plane, channels come
/// in sixteens, and a cell's index fits an `i32`.
fn applies(dx: usize, a: &[i32], dy: &[f32], pl: &Plane, relu: Relu<'_>) -> bool {
    let q = pl.pooled();
    let mask_fits = match relu {
        Relu::None => true,
        Relu::Pooled(p) => p.len() >= q,
        Relu::Input(x) => x.len() >= pl.image(),
    };
    dx >= pl.image()
        && a.len() >= q
        && dy.len() >= q
        && mask_fits
        && pl.c > 0
        && pl.c.is_multiple_of(16)
        && pl.h * pl.w < i32::MAX as usize
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Plane, Relu};
    use std::arch::x86_64::*;

    /// Sixteen channels of one pooled cell at `q`: the gradients, the argmax cells (32-bit,
    /// as the pooling forward writes them), and the channels a pooled ReLU mask keeps.
    ///
    /// # Safety
    /// AVX-512F; sixteen values at `q` in `dy`, `a` and a pooled mask.
    #[target_feature(enable = "avx512f")]
    unsafe fn pooled16(dy: &[f32], a: &[i32], relu: Relu<'_>, q: usize) -> (__m512, __m512i, __mmask16) {
        // SAFETY: the caller's.
        unsafe {
            let g = _mm512_loadu_ps(dy.as_ptr().add(q));
            let cell = _mm512_loadu_si512(a.as_ptr().add(q).cast());
            let keep = match relu {
                Relu::Pooled(p) => positive(p.as_ptr().add(q)),
                Relu::None | Relu::Input(_) => 0xffff,
            };
            (g, cell, keep)
        }
    }

    /// The lanes of the sixteen values at `v` that are above zero.
    #[target_feature(enable = "avx512f")]
    unsafe fn positive(v: *const f32) -> __mmask16 {
        // SAFETY: the caller's: sixteen readable floats at `v`.
        unsafe { _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_loadu_ps(v), _mm512_setzero_ps()) }
    }

    /// Both unpoolings over one plane, window after window. `TILED` (the windows tile the
    /// plane, `dx` unwritten): every cell of every window is stored once, zero plus the
    /// gradient under the mask, as the scatter into zeroes adds it. Otherwise (`dx`
    /// zeroed): the gradient is added to the cells the argmax names, in the portable
    /// loop's order.
    ///
    /// # Safety
    /// AVX-512F; the callers' checks (`applies`, and `Plane::tiles` with `TILED`); `dx`
    /// holds the plane.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn unpool<const TILED: bool>(dx: *mut f32, a: &[i32], dy: &[f32], pl: &Plane, relu: Relu<'_>) {
        let c = pl.c;
        // SAFETY (whole function): the caller's.
        unsafe {
            for oy in 0..pl.oh {
                for ox in 0..pl.ow {
                    let q = (oy * pl.ow + ox) * c;
                    let (rows, cols) = pl.cells(oy, ox);
                    for c0 in (0..c).step_by(16) {
                        let (g, cell, keep) = pooled16(dy, a, relu, q + c0);
                        if !TILED && keep == 0 {
                            continue;
                        }
                        for iy in rows.clone() {
                            for ix in cols.clone() {
                                let at = iy * pl.w + ix;
                                let d = dx.add(at * c + c0);
                                let mut hit = _mm512_mask_cmpeq_epi32_mask(keep, cell, _mm512_set1_epi32(at as i32));
                                if TILED {
                                    _mm512_storeu_ps(d, _mm512_maskz_add_ps(hit, _mm512_setzero_ps(), g));
                                    continue;
                                }
                                if let Relu::Input(x) = relu
                                    && hit != 0
                                {
                                    hit &= positive(x.as_ptr().add(at * c + c0));
                                }
                                if hit != 0 {
                                    _mm512_storeu_ps(
                                        d,
                                        _mm512_mask_add_ps(_mm512_loadu_ps(d), hit, _mm512_loadu_ps(d), g),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::pool::{pool_image, scatter_image, unpool_image};
    use engine_graph::ops::{Padding, Window};

    /// Windows that tile the plane write every cell once, the same bits as zeroing and
    /// scattering (ties, negative values, -0.0 and NaN gradients, with and without the
    /// ReLU mask); windows that overlap or leave cells out do not tile, and are refused.
    #[test]
    fn tiled_windows_write_what_the_scatter_into_zeroes_adds() -> Result<(), crate::RuntimeError> {
        let window = |k, s, padding| Window { kernel: [k, k], strides: [s, s], padding };
        for (k, s, padding, h, w, tiles) in [
            (2, 2, Padding::Valid, 8, 6, true),
            (2, 2, Padding::Same, 7, 9, true),
            (3, 3, Padding::Same, 8, 7, true),
            (2, 2, Padding::Valid, 7, 6, false),
            (3, 2, Padding::Same, 8, 8, false),
            (2, 3, Padding::Valid, 8, 8, false),
        ] {
            let pl = Plane::for_probe(&window(k, s, padding), [h, w], 32)?;
            assert_eq!(pl.tiles(), tiles, "window {k} stride {s} on {h}x{w}");
            if !crate::kernels::cpu::simd::has_avx512() {
                continue;
            }
            let x: Vec<f32> = (0..pl.image()).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
            let (mut pooled, mut at, mut pos) = (vec![0f32; pl.pooled()], vec![0i32; pl.pooled()], vec![0i32; pl.c]);
            pool_image(&x, &mut pooled, &mut at, &mut pos, &pl);
            let mut dy: Vec<f32> = (0..pl.pooled()).map(|i| ((i * 13) % 7) as f32 * 0.37 - 1.1).collect();
            dy[3] = -0.0;
            dy[40] = f32::NAN;
            for mask in [None, Some(&pooled[..])] {
                let mut want = vec![0f32; pl.image()];
                unpool_image(&mut want, &at, &dy, pl.c, (h * w) as i64, mask);
                let mut got = vec![std::mem::MaybeUninit::<f32>::uninit(); pl.image()];
                let relu = mask.map_or(Relu::None, Relu::Pooled);
                assert_eq!(unpool_tiled_f32(&mut got, &at, &dy, &pl, relu), tiles);
                if tiles {
                    // SAFETY: a tiling plane's every cell was written.
                    let got: Vec<u32> = got.iter().map(|v| unsafe { v.assume_init() }.to_bits()).collect();
                    let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "window {k} stride {s} on {h}x{w}, mask {}", mask.is_some());
                }
            }
        }
        Ok(())
    }

    /// Against the portable loop, bit for bit: overlapping and clipped windows, with and
    /// without the ReLU mask, argmaxes from the pooling forward.
    #[test]
    fn unpooling_equals_the_portable_loop_bit_for_bit() -> Result<(), crate::RuntimeError> {
        if !crate::kernels::cpu::simd::has_avx512() {
            return Ok(());
        }
        for (k, s, padding, c) in [(2, 2, Padding::Valid, 16), (3, 2, Padding::Same, 32), (3, 1, Padding::Same, 16)] {
            let (h, w) = (9, 7);
            let pl = Plane::for_probe(&Window { kernel: [k, k], strides: [s, s], padding }, [h, w], c)?;
            // Ties and negative values, so the mask and the first-maximum rule both matter.
            let x: Vec<f32> = (0..pl.image()).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
            let (mut pooled, mut at, mut pos) = (vec![0f32; pl.pooled()], vec![0i32; pl.pooled()], vec![0i32; c]);
            pool_image(&x, &mut pooled, &mut at, &mut pos, &pl);
            let dy: Vec<f32> = (0..pl.pooled()).map(|i| ((i * 13) % 7) as f32 * 0.37 - 1.1).collect();
            for (name, relu) in [("none", Relu::None), ("pooled", Relu::Pooled(&pooled)), ("input", Relu::Input(&x))] {
                let mut want = vec![0f32; pl.image()];
                match relu {
                    Relu::None => unpool_image(&mut want, &at, &dy, c, (h * w) as i64, None),
                    Relu::Pooled(p) => unpool_image(&mut want, &at, &dy, c, (h * w) as i64, Some(p)),
                    Relu::Input(x) => scatter_image(&mut want, &at, &dy, c, (h * w) as i64, Some(x)),
                }
                let mut got = vec![0f32; pl.image()];
                assert!(unpool_f32(&mut got, &at, &dy, &pl, relu));
                let same = want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "window {k} stride {s} channels {c} relu mask {name}");
            }
        }
        let pl = Plane::for_probe(&Window { kernel: [2, 2], strides: [2, 2], padding: Padding::Valid }, [4, 4], 8)?;
        assert!(pl.tiles());
        assert!(
            !unpool_f32(&mut [0f32; 128], &[0i32; 32], &[0f32; 32], &pl, Relu::None),
            "8 channels are not whole registers"
        );
        Ok(())
    }
}
