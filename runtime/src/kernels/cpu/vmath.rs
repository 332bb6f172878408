//! `exp` and `erf` in f32 as straight-line arithmetic that the compiler vectorizes: libm's
//! are called one element at a time, and the ViT spent a quarter of its step in them
//! (its attention's softmax and GELU's `erf`, 11.8 ms of 48). f64 keeps libm: gradient
//! checks run in f64 and measure the rules, not these approximations.
//!
//! `exp`: Cephes' `expf` (range reduction by ln 2 in two parts, a degree-6 polynomial),
//! within 2 ulp of the exact value over the normal range; underflow gives 0, overflow ∞,
//! NaN stays NaN. `erf`: its Taylor series below |x| = 0.5 (relative error under 1e-7)
//! and Numerical Recipes' `erfc` Chebyshev fit above (absolute error under 1.2e-7).
//!
//! The polynomials' steps are written `mul_add`: Rust never fuses `a * b + c` by itself,
//! so in the AVX2 builds (`multiversion!`'s `wide`) each step was a multiply and an add,
//! with every constant broadcast again for want of registers. A fused step rounds once,
//! the same on every CPU (where there is no FMA instruction, `fmaf` computes it exactly),
//! so the kernels' bits still do not depend on the machine.

use super::simd::multiversion;

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Below this, e^x is under f32's smallest normal: 0.
const EXP_MIN: f32 = -87.336_55;
/// Above this, e^x overflows f32: ∞.
const EXP_MAX: f32 = 88.722_83;
/// 1.5 · 2²³: adding it rounds to an integer held in the low mantissa bits.
const ROUNDER: f32 = 12_582_912.0;

#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    let c = x.clamp(EXP_MIN, EXP_MAX);
    // n = round(c / ln 2) by adding 1.5 · 2²³: the sum's low mantissa bits are n (in two's
    // complement), with no float-to-int conversion, which does not vectorize well.
    let shifted = c * LOG2E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = c - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5);
    let y = (p * r).mul_add(r, r) + 1.0;
    // 2^n by its exponent bits; n + 127 is in [1, 254] after the clamp.
    let bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    let scale = f32::from_bits(bits.wrapping_add(127) << 23);
    let v = y * scale;
    if x < EXP_MIN {
        0.0
    } else if x > EXP_MAX {
        f32::INFINITY
    } else {
        v
    }
}

#[inline(always)]
pub(super) fn erf(x: f32) -> f32 {
    let a = x.abs();
    // Small: 2/√π (x - x³/3 + x⁵/10 - x⁷/42 + x⁹/216 - x¹¹/1320 + x¹³/9360).
    let z = x * x;
    let mut s = 1.0 / 9360.0f32;
    s = s.mul_add(-z, 1.0 / 1320.0);
    s = s.mul_add(-z, 1.0 / 216.0);
    s = s.mul_add(-z, 1.0 / 42.0);
    s = s.mul_add(-z, 1.0 / 10.0);
    s = s.mul_add(-z, 1.0 / 3.0);
    s = s.mul_add(-z, 1.0);
    let small = x * s * std::f32::consts::FRAC_2_SQRT_PI;
    // Large: 1 - erfc(|x|), erfc(a) = t exp(-a² + P(t)), t = 1 / (1 + a / 2).
    let t = 1.0 / (1.0 + 0.5 * a);
    let mut q = 0.170_872_77f32;
    q = q.mul_add(t, -0.822_152_23);
    q = q.mul_add(t, 1.488_515_9);
    q = q.mul_add(t, -1.135_204);
    q = q.mul_add(t, 0.278_868_07);
    q = q.mul_add(t, -0.186_288_06);
    q = q.mul_add(t, 0.096_784_18);
    q = q.mul_add(t, 0.374_091_96);
    q = q.mul_add(t, 1.000_023_7);
    q = q.mul_add(t, -1.265_512_2);
    let large = (1.0 - t * exp(-a * a + q)).copysign(x);
    if a < 0.5 { small } else { large }
}

multiversion! {
    /// `out[i] = exp(xs[i] - shift)`; returns their sum.
    pub(super) fn exp_shifted(out: &mut [f32], xs: &[f32], shift: f32) -> f32 {
        for (o, &x) in out.iter_mut().zip(xs) {
            *o = exp(x - shift);
        }
        // Eight lanes: one running sum would serialize the adds.
        let mut lanes = [0.0f32; 8];
        let mut chunks = out.chunks_exact(8);
        for c in &mut chunks {
            lanes.iter_mut().zip(c).for_each(|(l, v)| *l += v);
        }
        lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
    }
}

multiversion! {
    /// `erf` of each element, in place.
    pub(super) fn erf_in_place(xs: &mut [f32]) {
        for x in xs.iter_mut() {
            *x = erf(*x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(from: f32, to: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| from + (to - from) * i as f32 / n as f32)
    }

    #[test]
    fn exp_is_within_two_ulp_and_keeps_the_edges() {
        for x in grid(-87.0, 88.0, 200_000) {
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            assert!(((got - want) / want).abs() < 2.5e-7, "exp({x}) = {got}, want {want}");
        }
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn erf_is_close_in_absolute_and_relative_terms() {
        for x in grid(-6.0, 6.0, 200_000) {
            let want = libm_erf(f64::from(x));
            let got = f64::from(erf(x));
            assert!((got - want).abs() < 2.5e-7, "erf({x}) = {got}, want {want}");
            if x.abs() < 0.5 && x != 0.0 {
                assert!(((got - want) / want).abs() < 3e-7, "erf({x}) = {got}, want {want}");
            }
        }
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
    }

    /// erf in f64 by its series (|x| < 3) or its asymptotic complement, to 1e-12.
    fn libm_erf(x: f64) -> f64 {
        if x.abs() < 3.0 {
            let (mut term, mut sum, z) = (x, x, x * x);
            for n in 1..200 {
                term *= -z / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            // erfc by its continued fraction, which converges fast out here.
            let a = x.abs();
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = (k as f64 / 2.0) / (a + f);
            }
            let erfc = (-a * a).exp() / (std::f64::consts::PI.sqrt() * (a + f));
            (1.0 - erfc).copysign(x)
        }
    }
}
