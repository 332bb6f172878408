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

multiversion! {
    /// `x - x` is 0 for a finite `x` and NaN otherwise, and a sum with a NaN is NaN: one
    /// branch-free pass over independent lanes, which the compiler vectorizes.
    #[allow(clippy::eq_op)]
    pub(super) fn all_finite<E: Elem>(data: &[E]) -> bool {
        let mut lanes = [E::zero(); 16];
        let mut chunks = data.chunks_exact(16);
        for chunk in &mut chunks {
            for (lane, &x) in lanes.iter_mut().zip(chunk) {
                *lane += x - x;
            }
        }
        let tail = chunks.remainder().iter().fold(E::zero(), |acc, &x| acc + (x - x));
        lanes.iter().fold(tail, |acc, &x| acc + x) == E::zero()
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
