//! Dropout with counter-based masks: unit `i` of a step's global batch is kept when a
//! 32-bit hash of `i` and a seed derived from (op seed, global step) falls below
//! `keep * 2^32`. No generator state, so the host (the CPU kernels) and a device (its own
//! integer kernels, no upload) compute the same bits, each unit on its own: reproducible
//! across restarts and identical on every backend. Replica `r` starts at its rows' offset
//! in the global batch (`r * n`; every replica's batch has the same size in training), so
//! a unit is dropped or kept the same whether the global batch runs on one device or is
//! split over replicas.

use super::{KernelCtx, dims};
use crate::{Precision, Result, Value, value::B};
use burn::backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn::backend::{DispatchDevice, TensorMetadata};
use burn::tensor::{Shape as BurnShape, TensorData};
use engine_graph::{derive_seed, ops::Dropout};

const LOW32: u64 = 0xFFFF_FFFF;
/// Odd multipliers below 2^31: a 32-bit value times one stays below 2^63, so a device
/// computes the hash in signed 64-bit integers without overflow, bit for bit as here.
const MUL: [u64; 2] = [0x7feb_352d, 0x2c1b_3c6d];

/// The seed of `d`'s mask at global step `step`, folded to 32 bits.
pub(crate) fn step_seed(d: &Dropout, step: i64) -> u64 {
    let seed = derive_seed(d.seed, &format!("dropout/{step}"));
    (seed ^ (seed >> 32)) & LOW32
}

/// One step's stream: the seed folded to 32 bits, the replica's first key, and the
/// threshold a kept unit's hash falls below.
pub(super) struct Stream {
    seed: u64,
    offset: u64,
    threshold: u64,
}

impl Stream {
    fn new(d: &Dropout, n: usize, ctx: &KernelCtx<'_>) -> Self {
        let keep = 1.0 - d.rate as f64;
        Stream {
            seed: step_seed(d, ctx.step),
            offset: ctx.replica.wrapping_mul(n as u64),
            threshold: (keep * (1u64 << 32) as f64).round().clamp(0.0, (1u64 << 32) as f64) as u64,
        }
    }
}

impl Stream {
    /// The stream in 32-bit lanes: the first key, the seed and the threshold (`None`: every
    /// unit is kept).
    pub(super) fn lanes(d: &Dropout, n: usize, ctx: &KernelCtx<'_>) -> (u32, u32, Option<u32>) {
        let s = Stream::new(d, n, ctx);
        (s.offset as u32, s.seed as u32, u32::try_from(s.threshold).ok())
    }
}

/// Whether unit `i` is kept, for the stream's `lanes`: [`hash`] in 32-bit arithmetic,
/// which gives the same bits (the low 32 bits of a sum or a product depend only on the
/// operands' low 32 bits) and vectorizes, 8 or 16 lanes at a time.
#[inline(always)]
pub(super) fn kept(i: u32, (offset, seed, threshold): (u32, u32, Option<u32>)) -> bool {
    let mut x = offset.wrapping_add(i) ^ seed;
    for m in MUL {
        x ^= x >> 16;
        x = x.wrapping_mul(m as u32);
    }
    threshold.is_none_or(|t| (x ^ (x >> 15)) < t)
}

/// The hash of key `k` (only its low 32 bits count) under `seed`, in 32 bits.
#[cfg(test)]
fn hash(k: u64, seed: u64) -> u64 {
    let mut x = (k ^ seed) & LOW32;
    for m in MUL {
        x ^= x >> 16;
        x = (x * m) & LOW32;
    }
    x ^ (x >> 15)
}

pub(super) fn scale<E: num_traits::Float>(d: &Dropout, ctx: &KernelCtx<'_>) -> Result<E> {
    E::from(1.0 / (1.0 - d.rate as f64)).ok_or_else(|| ctx.err("dropout scale out of range"))
}

/// The mask over `n` units on the host: `1 / keep` (rounded once to `E`) where a unit is
/// kept, else zero.
fn mask<E: num_traits::Float>(d: &Dropout, n: usize, ctx: &KernelCtx<'_>) -> Result<Vec<E>> {
    let lanes = Stream::lanes(d, n, ctx);
    let scale = scale::<E>(d, ctx)?;
    Ok((0..n).map(|i| if kept(i as u32, lanes) { scale } else { E::zero() }).collect())
}

/// The same mask computed on the device from an index range, in the device's kernels.
fn device_mask(d: &Dropout, shape: &[usize], ctx: &KernelCtx<'_>) -> Result<crate::value::T> {
    let n: usize = shape.iter().product();
    let s = Stream::new(d, n, ctx);
    let scale = scale::<f64>(d, ctx)?;
    let low = |t| B::bitwise_and_scalar(t, (LOW32 as i64).into());
    let keys = keys(n, ctx);
    let keys = B::int_add_scalar(keys, (s.offset as i64).into());
    let mut x = match ctx.seed {
        // A replayed step's seed lives on the device, written before every replay.
        Some(seed) => {
            let shape = keys.shape();
            B::bitwise_xor(keys, B::int_expand(seed.clone(), shape))
        }
        // Baked into a recording, the mask would repeat the recorded step's every step.
        None if ctx.recording => return Err(ctx.err("its mask's seed is not on the device in a recorded step")),
        None => B::bitwise_xor_scalar(keys, (s.seed as i64).into()),
    };
    x = low(x);
    for m in MUL {
        x = B::bitwise_xor(x.clone(), B::bitwise_right_shift_scalar(x, 16i64.into()));
        x = low(B::int_mul_scalar(x, (m as i64).into()));
    }
    x = B::bitwise_xor(x.clone(), B::bitwise_right_shift_scalar(x, 15i64.into()));
    let kept = B::int_lower_elem(x, (s.threshold as i64).into(), ctx.bool_dtype());
    let ones = B::bool_into_float(kept, ctx.precision.dtype());
    Ok(B::float_reshape(B::float_mul_scalar(ones, scale.into()), BurnShape::from(shape.to_vec())))
}

/// The keys `0..n` on the device, from aranges of at most 4,096 values each: burn's `fusion`
/// computes `int_arange` as a cumulative sum of ones, which on lavapipe came out wrong for
/// long ranges (a mask over 70,000 units differed from the host's at 2,190 of them, all
/// past 65,540; built from rows of 65,536 keys, one unit in 200,000 still differed, the
/// last of a row). Rows of 4,096 keys plus each row's start, the starts themselves built
/// the same way, reach every 32-bit key in three levels.
fn keys(n: usize, ctx: &KernelCtx<'_>) -> crate::value::T {
    const ROW: usize = 1 << 12;
    if n <= ROW {
        return ctx.range(n);
    }
    let rows = n.div_ceil(ROW);
    let starts = B::int_mul_scalar(keys(rows, ctx), (ROW as i64).into());
    let starts = B::int_reshape(starts, BurnShape::from(vec![rows, 1]));
    let within = B::int_reshape(keys(ROW, ctx), BurnShape::from(vec![1, ROW]));
    let grid = BurnShape::from(vec![rows, ROW]);
    let all = B::int_add(B::int_expand(starts, grid.clone()), B::int_expand(within, grid));
    let flat = B::int_reshape(all, BurnShape::from(vec![rows * ROW]));
    B::int_slice(flat, &[burn::tensor::Slice::from(0..n)])
}

pub(super) fn run(d: &Dropout, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [x] = ctx.floats(inputs)?;
    let mask = mask_tensor(d, &dims(&x), ctx)?;
    Ok(vec![Value::Float(B::float_mul(x, mask.clone())), Value::Float(mask)])
}

/// The step's mask over a tensor of `shape`, where the tensor lives: drawn on the host
/// for the CPU, by the device's own integer kernels elsewhere.
pub(super) fn mask_tensor(d: &Dropout, shape: &[usize], ctx: &KernelCtx<'_>) -> Result<crate::value::T> {
    // An if, not a match: a build without GPU features has no other device variant.
    if matches!(ctx.device, DispatchDevice::Flex(_)) {
        let n = shape.iter().product();
        let data = match ctx.precision {
            Precision::F32 | Precision::Bf16Mixed => {
                TensorData::new(mask::<f32>(d, n, ctx)?, BurnShape::from(shape.to_vec()))
            }
            Precision::F64 => TensorData::new(mask::<f64>(d, n, ctx)?, BurnShape::from(shape.to_vec())),
        };
        Ok(B::float_from_data(data, ctx.device))
    } else {
        device_mask(d, shape, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash must spread consecutive keys: over 2^16 keys, the fraction below a
    /// threshold matches it, and neighbouring keys are not correlated.
    #[test]
    fn hash_is_uniform_enough_for_masks() {
        let seed = 0x1234_5678;
        let n = 1u64 << 16;
        for keep in [0.1, 0.5, 0.8] {
            let threshold = (keep * (1u64 << 32) as f64) as u64;
            let kept = (0..n).filter(|&k| hash(k, seed) < threshold).count() as f64 / n as f64;
            assert!((kept - keep).abs() < 0.01, "keep {keep}: kept {kept}");
        }
        let both = (0..n).filter(|&k| hash(k, seed) < 1 << 31 && hash(k + 1, seed) < 1 << 31).count() as f64;
        assert!((both / n as f64 - 0.25).abs() < 0.01, "neighbours kept together {}", both / n as f64);
        assert_ne!(hash(5, seed), hash(5, seed + 1), "the seed must change the stream");
    }

    /// The 32-bit form the kernels use is the hash bit for bit, keys past 2^32 included.
    #[test]
    fn the_32_bit_lanes_are_the_hash() {
        for (offset, seed) in [(0u64, 0x1234_5678u64), ((1 << 32) - 3, 0xffff_ffff), (7 << 33, 1)] {
            for threshold in [0u64, 1 << 31, (1 << 32) - 1, 1 << 32] {
                let lanes = (offset as u32, seed as u32, u32::try_from(threshold).ok());
                for i in 0..4096u64 {
                    let want = hash(offset.wrapping_add(i), seed) < threshold;
                    assert_eq!(kept(i as u32, lanes), want, "offset {offset}, threshold {threshold}, unit {i}");
                }
            }
        }
    }
}
