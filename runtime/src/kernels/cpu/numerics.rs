//! Finiteness of a native buffer, read in place.

use super::{
    buffer::{Elem, view},
    simd::multiversion,
};
use crate::value::T;

/// `(NaN count, infinity count)` of a flex float tensor.
pub(crate) fn non_finite<E: Elem>(t: &T) -> (usize, usize) {
    let data = view::<E>(t);
    if all_finite(&data) {
        return (0, 0);
    }
    let nan = data.iter().filter(|x| x.is_nan()).count();
    let inf = data.iter().filter(|x| x.is_infinite()).count();
    (nan, inf)
}

/// Sixteen independent lanes of `x - x` summed: `x - x` is 0 for a finite `x` and NaN
/// otherwise, and a sum with a NaN is NaN, so the lanes end at zero only if every value
/// noted was finite. Branch-free, and kept in registers by the loops that note a value as
/// they produce it (a fused pass's store, an optimizer's update) instead of reading it
/// back in a pass of its own.
#[derive(Clone, Copy)]
pub(super) struct FiniteLanes<E>([E; 16]);

impl<E: Elem> FiniteLanes<E> {
    #[inline(always)]
    pub fn new() -> Self {
        FiniteLanes([E::zero(); 16])
    }

    /// Adds `x` to lane `k` (below 16).
    #[allow(clippy::eq_op)]
    #[inline(always)]
    pub fn note(&mut self, k: usize, x: E) {
        self.0[k] += x - x;
    }

    /// Whether every value noted was finite.
    #[inline(always)]
    pub fn finite(&self) -> bool {
        self.0.iter().fold(E::zero(), |acc, &x| acc + x) == E::zero()
    }
}

multiversion! {
    /// Whether every value of `data` is finite: one pass over [`FiniteLanes`], which the
    /// compiler vectorizes.
    pub(super) fn all_finite<E: Elem>(data: &[E]) -> bool {
        let mut lanes = FiniteLanes::new();
        let mut chunks = data.chunks_exact(16);
        for chunk in &mut chunks {
            for (k, &x) in chunk.iter().enumerate() {
                lanes.note(k, x);
            }
        }
        for (k, &x) in chunks.remainder().iter().enumerate() {
            lanes.note(k, x);
        }
        lanes.finite()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_nan_or_infinity_anywhere_is_found() {
        for n in [0usize, 1, 15, 16, 17, 100] {
            let clean: Vec<f32> = (0..n).map(|i| i as f32 - 50.0).collect();
            assert!(all_finite(&clean));
            for at in 0..n {
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    let mut v = clean.clone();
                    v[at] = bad;
                    assert!(!all_finite(&v), "n={n} at={at} {bad}");
                }
            }
        }
        // Large finite values do not overflow the check.
        assert!(all_finite(&[f64::MAX; 40]));
    }
}
