//! Reductions along one axis, in stages no longer than [`STAGE`] values on cubecl devices.
//!
//! Why: burn-cubecl 0.22's axis reductions on lavapipe silently drop values of a long
//! axis. Summing a `[100352, 1]` tensor over its first axis gave the sum of its first
//! 65,536 rows; its max missed a 5.0 in the last row; along the last axis the sum was
//! wrong at 65,537 and 10^6 values (right at 100,352). Batch normalization reduces
//! `batch · height · width` rows, 100,352 for the ResNet spec at its batch of 128, so its
//! statistics were wrong by a third and the first step's loss differed from the CPU's.
//! Whether CUDA shares the fault is not measured; the stages cost one extra small
//! reduction, so every cubecl device takes them. flex reduces in one go.
//!
//! Stages also make a long axis with few outputs parallel: burn's reduction runs one
//! thread per output, each summing its axis serially, so batch normalization's statistics
//! (100,352 rows of 16 to 64 channels in the ResNet spec) kept an H200 a few hundred
//! threads busy for milliseconds: its batch normalizations were 40 % of a step's device
//! time, in a step that eager PyTorch runs in an eighth of it. Split into stages of at
//! most [`PARALLEL`] values, the first level has `n / PARALLEL` times as many threads.

use super::shape::pad_with;
use crate::value::{B, T};
use burn::backend::ops::FloatTensorOps;
use burn::backend::{DispatchDevice, TensorMetadata};
use burn::tensor::Shape as BurnShape;

/// The longest axis one reduction kernel is given: well below the 65,536 where values
/// went missing.
const STAGE: usize = 1 << 14;

/// The longest stage where a reduction has fewer than [`FEW_OUTPUTS`] outputs.
const PARALLEL: usize = 256;
/// Below this many outputs a device is mostly idle during a single reduction.
const FEW_OUTPUTS: usize = 1 << 14;

#[derive(Clone, Copy)]
enum How {
    Sum,
    Max,
}

/// `Σ` along `axis`, kept as size 1 (as burn's `float_sum_dim`).
pub(crate) fn sum_dim(t: T, axis: usize) -> T {
    staged(t, axis, How::Sum)
}

/// The mean along `axis`: the staged sum over the axis's length.
pub(crate) fn mean_dim(t: T, axis: usize) -> T {
    let n = t.shape()[axis];
    if stage(&t, axis).is_none() {
        return B::float_mean_dim(t, axis);
    }
    B::float_div_scalar(sum_dim(t, axis), (n as f64).into())
}

/// The largest value along `axis`.
pub(crate) fn max_dim(t: T, axis: usize) -> T {
    staged(t, axis, How::Max)
}

/// The stage length `axis` of `t` is reduced in, or `None` for one reduction.
fn stage(t: &T, axis: usize) -> Option<usize> {
    let dims = t.shape().to_vec();
    let n = dims[axis];
    if is_flex(t) {
        return None;
    }
    let outputs = dims.iter().product::<usize>() / n.max(1);
    if outputs < FEW_OUTPUTS && n > PARALLEL {
        // A length that divides the axis needs no padding (a copy of the whole tensor).
        Some((PARALLEL / 4..=PARALLEL).rev().find(|&l| n.is_multiple_of(l)).unwrap_or(PARALLEL))
    } else {
        (n > STAGE).then_some(STAGE)
    }
}

fn staged(t: T, axis: usize, how: How) -> T {
    let Some(length) = stage(&t, axis) else { return one(t, axis, how) };
    let dims = t.shape().to_vec();
    let n = dims[axis];
    // Pad the axis to whole stages with the reduction's identity, split it into
    // `[stages, length]`, reduce the stages' insides, then the stages.
    let stages = n.div_ceil(length);
    let identity = match how {
        How::Sum => 0.0,
        How::Max => f32::NEG_INFINITY,
    };
    let padded = if stages * length == n {
        t
    } else {
        let mut pads = vec![(0, 0); dims.len()];
        pads[axis] = (0, stages * length - n);
        pad_with(t, &pads, identity)
    };
    let mut split = dims.clone();
    split.splice(axis..=axis, [stages, length]);
    let inner = one(B::float_reshape(padded, BurnShape::from(split)), axis + 1, how);
    let mut outer = dims;
    outer[axis] = stages;
    staged(B::float_reshape(inner, BurnShape::from(outer)), axis, how)
}

fn one(t: T, axis: usize, how: How) -> T {
    match how {
        How::Sum => B::float_sum_dim(t, axis),
        How::Max => B::float_max_dim(t, axis),
    }
}

fn is_flex(t: &T) -> bool {
    matches!(t.device(), DispatchDevice::Flex(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Precision;
    use crate::value::float_from_f64;

    /// flex, and each device named in `ENGINE_TEST_DEVICES`, their turn held while iterated.
    fn devices() -> impl Iterator<Item = DispatchDevice> {
        let devices = crate::device::test_devices().map(|(_, d)| d);
        std::iter::once(DispatchDevice::Flex(burn::backend::FlexDevice)).chain(devices)
    }

    fn read(t: T) -> Vec<f64> {
        let data = burn::backend::read_sync(B::float_into_data(t)).unwrap();
        data.convert::<f64>().try_into_vec::<f64>().unwrap()
    }

    /// Long axes, first and last, sums, means and maxima, against the host: the sizes at
    /// which lavapipe's single reductions went wrong included.
    #[test]
    fn long_axes_reduce_every_value() {
        for device in devices() {
            for n in [100usize, 65_536, 65_537, 100_352, 1_000_000] {
                let mut data: Vec<f64> = (0..n).map(|i| ((i * 7919) % 1000) as f64 / 1000.0).collect();
                data[n - 1] = 5.0;
                let sum: f64 = data.iter().sum();
                for dims in [[n, 1], [1, n]] {
                    let axis = if dims[0] == n { 0 } else { 1 };
                    let t = float_from_f64(&dims, data.clone(), &device, Precision::F32);
                    let case = format!("{device:?}, {dims:?} along {axis}");
                    let got = read(sum_dim(t.clone(), axis))[0];
                    assert!((got - sum).abs() <= 1e-5 * sum, "{case}: sum {got} against {sum}");
                    let mean = read(mean_dim(t.clone(), axis))[0];
                    assert!((mean - sum / n as f64).abs() <= 1e-5 * sum / n as f64, "{case}: mean {mean}");
                    assert_eq!(read(max_dim(t, axis))[0], 5.0, "{case}: max");
                }
            }
        }
    }

    /// The other axes keep their values apart: a `[rows, 3]` matrix reduced over its rows.
    #[test]
    fn stages_keep_the_other_axes_apart() {
        for device in devices() {
            let rows = 70_000;
            let data: Vec<f64> = (0..rows * 3).map(|i| (i % 3) as f64 + 1.0).collect();
            let t = float_from_f64(&[rows, 3], data, &device, Precision::F32);
            assert_eq!(read(sum_dim(t.clone(), 0)), vec![70_000.0, 140_000.0, 210_000.0], "{device:?}");
            assert_eq!(read(max_dim(t, 0)), vec![1.0, 2.0, 3.0], "{device:?}");
        }
    }
}
