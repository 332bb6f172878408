//! The decoding threads' per-value loops, compiled twice, for baseline x86-64 and for
//! AVX2, with the pick made at run time by the runtime's own dispatcher. Rust builds for
//! SSE2 unless told otherwise, and there `Scale(255.0)`'s division over a batch of images
//! ran four lanes at a time: on the MLP at one thread it was a fifth of the decoding
//! thread's time.

engine_runtime::multiversion! {
    /// Divides every value by `divisor`: the same quotients whichever build runs (IEEE
    /// division is exact to the rounding, at any width).
    pub(crate) fn divide(values: &mut [f32], divisor: f32) {
        values.iter_mut().for_each(|x| *x /= divisor);
    }
}

engine_runtime::multiversion! {
    /// Appends `bytes` as f32 values (the pixels of an IDX image).
    pub(crate) fn extend_from_u8(out: &mut Vec<f32>, bytes: &[u8]) {
        out.reserve(bytes.len());
        out.extend(bytes.iter().map(|&b| f32::from(b)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_loops_give_the_plain_results() {
        let bytes: Vec<u8> = (0..=255).chain(0..37).collect();
        let mut out = vec![-1.0];
        extend_from_u8(&mut out, &bytes);
        assert_eq!(out.len(), bytes.len() + 1);
        assert!(out[1..].iter().zip(&bytes).all(|(&x, &b)| x == f32::from(b)));
        let mut scaled = out.clone();
        divide(&mut scaled, 255.0);
        for (s, x) in scaled.iter().zip(&out) {
            assert_eq!(s.to_bits(), (x / 255.0).to_bits());
        }
    }
}
