//! A counter-based random stream for shuffling.
//!
//! Draw `k` of a stream is `mix(seed, k)`, so the whole generator state is two integers
//! (seed, draws so far): an iterator state stays small and restores exactly in another
//! process, with no generator internals to serialize.

/// SplitMix64's finalizer: a bijection on u64 that spreads every input bit over the output.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of epoch `epoch` of a stream seeded with `seed` (reshuffling each epoch).
pub(crate) fn derive(seed: u64, epoch: u64) -> u64 {
    mix64(seed ^ mix64(epoch.wrapping_add(0x2545_f491_4f6c_dd1d)))
}

/// Draw number `counter` of stream `seed`, uniform in `0..n` (n > 0), by Lemire's
/// multiply-shift (bias below 2^-40 for any buffer size that fits in memory).
pub(crate) fn below(seed: u64, counter: u64, n: usize) -> usize {
    let r = mix64(seed ^ mix64(counter));
    ((u128::from(r) * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_enough_and_seeded() {
        let mut counts = [0usize; 10];
        for k in 0..100_000 {
            counts[below(7, k, 10)] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
        assert_ne!(below(1, 0, 1 << 30), below(2, 0, 1 << 30));
        assert_ne!(derive(1, 0), derive(1, 1));
    }
}
