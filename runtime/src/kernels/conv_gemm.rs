//! Convolutions as a patch matrix times the filter (im2col and one GEMM), in the graph's
//! own NHWC/HWIO layout, on devices (and the CPU where its native kernels do not apply).
//!
//! Why: without burn's `autotune`, burn-cubecl runs direct convolution kernels with one
//! thread per output value. A filter gradient has few values, each a sum over the whole
//! batch: the tutorial CNN's first layer (288 weights, each a sum of 346,112 products at
//! batch 512) took 33 ms of a 41 ms step on an H200 while the rest of the step took 8.
//! As a GEMM it runs on the device's matmul, which spreads its work over the whole device
//! (here split over the batch, then summed), and the NHWC layout needs no permute around
//! it. What it costs is the patch matrix, the input `kh · kw` times over: it is built for
//! as many examples at a time as fit [`MOST_PATCH_BYTES`] and the device's largest
//! buffer. It wins where a direct kernel would have too few threads to fill a GPU, filter
//! gradients above all, or long sums to run serially per thread; `conv_form` measures
//! which form a pass runs. Grouped and dilated convolutions, and one example whose
//! patches do not fit, keep burn's kernels.
//!
//! On lavapipe, whose "threads" are the CPU's vector lanes, a matmul tile's idle lanes
//! cost real time (the CNN's filter gradient at batch 64: 73 ms against the direct
//! kernel's 25; with every pass a GEMM, the residual model's steps took twice as long).

use super::shape::zero_pad;
use crate::value::{B, T};
use burn::backend::TensorMetadata;
use burn::backend::ops::FloatTensorOps;
use burn::tensor::{Shape as BurnShape, Slice as BurnSlice};
use engine_graph::ops::Conv2d;

/// A filter gradient is split into this many partial products at most, counted in
/// filter values: enough independent outputs to fill a GPU, few enough that the partial
/// sums stay small next to the patches.
const SPLIT_OUTPUTS: usize = 1 << 20;

/// The largest patch matrix built at once. A GEMM over more rows than this gains nothing
/// (it already fills the device) and holds the memory while the op runs.
pub(super) const MOST_PATCH_BYTES: u64 = 1 << 30;

/// One convolution's geometry, for the cases a GEMM covers here (groups 1, no dilation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Geometry {
    pub(super) kernel: [usize; 2],
    pub(super) strides: [usize; 2],
    /// Zeros before and after the input: top, bottom, left, right.
    pub(super) pads: [usize; 4],
    pub(super) in_hw: [usize; 2],
    pub(super) out_hw: [usize; 2],
}

/// How a patch matrix's rows map onto its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Patches {
    /// The forward pass's (and the filter gradient's): row `(n, oy, ox)`, tap `(i, j)`
    /// reads `x[n, oy·sh + i − pt, ox·sw + j − pl]`, zero in the padding.
    Forward,
    /// The input gradient's, the transposed convolution as a gather: row `(n, y, x)`, tap
    /// `(i, j)` reads `gy[n, (y + pt − i) / sh, (x + pl − j) / sw]` where both divide
    /// exactly and land inside `gy` (zero elsewhere), so that these patches times the
    /// filter as `[kh · kw · o, c]` give the input's gradient with no spread, pad or crop.
    Transposed,
}

/// The patch matrix `[rows, kh · kw · channels]` from one cubecl kernel, where `src` is in
/// a cubecl buffer (`None` elsewhere: the caller builds it from burn's ops).
/// `ENGINE_CONV_PATCHES=ops` builds them from burn's ops on devices too: a benchmark's
/// lever, to set the two against each other with one binary on a GPU. Under burn's
/// `fusion` a device tensor is no cubecl buffer, and the ops build them.
#[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
fn kernel_patches(src: &T, g: &Geometry, how: Patches) -> Option<T> {
    static FROM_OPS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *FROM_OPS.get_or_init(|| std::env::var("ENGINE_CONV_PATCHES").is_ok_and(|v| v == "ops")) {
        return None;
    }
    super::patch_kernel::patches(src, g, how)
}

#[cfg(not(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion"))))]
fn kernel_patches(_: &T, _: &Geometry, _: Patches) -> Option<T> {
    None
}

impl Geometry {
    /// `None` for a grouped or dilated convolution.
    pub(super) fn new(c: &Conv2d, kernel: [usize; 2], in_hw: [usize; 2]) -> Result<Option<Geometry>, String> {
        if c.groups != 1 || c.dilation != [1, 1] {
            return Ok(None);
        }
        let (out_hw, pads) = c.window(kernel).output(in_hw)?;
        Ok(Some(Geometry { kernel, strides: c.strides, pads, in_hw, out_hw }))
    }

    /// The forward pass's output values.
    pub(super) fn outputs(&self, batch: usize, out_channels: usize) -> usize {
        batch * self.out_hw[0] * self.out_hw[1] * out_channels
    }

    /// One example's patch values in the forward pass and the filter gradient.
    pub(super) fn patch_values(&self, in_channels: usize) -> usize {
        self.out_hw[0] * self.out_hw[1] * self.kernel[0] * self.kernel[1] * in_channels
    }

    /// One example's patch values in the input gradient, a convolution over the whole
    /// padded input of the output's gradient.
    pub(super) fn input_grad_patch_values(&self, out_channels: usize) -> usize {
        let [hp, wp] = self.padded_hw();
        hp * wp * self.kernel[0] * self.kernel[1] * out_channels
    }

    fn padded_hw(&self) -> [usize; 2] {
        let [pt, pb, pl, pr] = self.pads;
        [self.in_hw[0] + pt + pb, self.in_hw[1] + pl + pr]
    }
}

/// Examples per GEMM: the largest divisor of the batch whose patches take at most
/// `budget` values, or `None` when one example's do not fit.
pub(super) fn batch_chunk(batch: usize, per_example: usize, budget: u64) -> Option<usize> {
    let most = usize::try_from(budget / per_example.max(1) as u64).unwrap_or(usize::MAX);
    largest_divisor_at_most(batch, most)
}

/// The largest divisor of `n` that is at most `most` (`None` when `most` is 0).
fn largest_divisor_at_most(n: usize, most: usize) -> Option<usize> {
    (1..=most.min(n)).rev().find(|d| n.is_multiple_of(*d))
}

/// `y = conv(x, w)`: x `[n, h, w, c]`, w `[kh, kw, c, o]`, y `[n, oh, ow, o]`, `chunk`
/// examples per GEMM.
pub(super) fn forward(x: T, w: T, g: &Geometry, chunk: usize) -> T {
    let parts = batches(x.shape()[0], chunk).map(|r| forward_all(slice_batch(&x, r), w.clone(), g)).collect();
    cat_batches(parts)
}

/// The filter's gradient `[kh, kw, c, o]` from x `[n, h, w, c]` and the output's gradient
/// `gy` `[n, oh, ow, o]`, `chunk` examples per GEMM.
pub(super) fn filter_grad(x: T, gy: T, g: &Geometry, chunk: usize) -> T {
    let mut parts =
        batches(x.shape()[0], chunk).map(|r| filter_grad_all(slice_batch(&x, r.clone()), slice_batch(&gy, r), g));
    let first = parts.next().unwrap_or_else(|| filter_grad_all(x.clone(), gy.clone(), g));
    parts.fold(first, B::float_add)
}

/// The input's gradient `[n, h, w, c]` from the filter `[kh, kw, c, o]` and `gy`, `chunk`
/// examples per GEMM.
pub(super) fn input_grad(w: T, gy: T, g: &Geometry, chunk: usize) -> T {
    let parts = batches(gy.shape()[0], chunk).map(|r| input_grad_all(w.clone(), slice_batch(&gy, r), g)).collect();
    cat_batches(parts)
}

fn forward_all(x: T, w: T, g: &Geometry) -> T {
    let (n, [kh, kw, c, o]) = (x.shape()[0], dims4(&w));
    let [oh, ow] = g.out_hw;
    let cols = reshape(patches(x, g), &[n * oh * ow, kh * kw * c]);
    reshape(B::float_matmul(cols, reshape(w, &[kh * kw * c, o])), &[n, oh, ow, o])
}

/// patchesᵀ · gy, over `splits` slices of the batch, then summed.
fn filter_grad_all(x: T, gy: T, g: &Geometry) -> T {
    let (n, c, o) = (x.shape()[0], x.shape()[3], gy.shape()[3]);
    let [kh, kw] = g.kernel;
    let [oh, ow] = g.out_hw;
    let k = kh * kw * c;
    let s = splits(n, k * o);
    let rows = n / s * oh * ow;
    let cols = reshape(patches(x, g), &[s, rows, k]);
    let parts = B::float_matmul(B::float_swap_dims(cols, 1, 2), reshape(gy, &[s, rows, o]));
    let sum = if s > 1 { super::staged_reduce::sum_dim(parts, 0) } else { parts };
    reshape(sum, &[kh, kw, c, o])
}

/// On a cubecl device, the transposed convolution's patches of `gy` (the patch kernel's
/// gather) times the filter with its channel axes swapped. Elsewhere, the convolution of
/// `gy` (spread by the strides, padded by the filter's size less one) with the filter
/// turned half a turn and its channels swapped, cropped to the unpadded input.
fn input_grad_all(w: T, gy: T, g: &Geometry) -> T {
    let [kh, kw, c, o] = dims4(&w);
    let n = gy.shape()[0];
    if let Some(cols) = kernel_patches(&gy, g, Patches::Transposed) {
        let [h, wd] = g.in_hw;
        let turned = reshape(B::float_swap_dims(w, 2, 3), &[kh * kw * o, c]);
        return reshape(B::float_matmul(cols, turned), &[n, h, wd, c]);
    }
    let [oh, ow] = g.out_hw;
    let [pt, _, pl, _] = g.pads;
    let [hp, wp] = g.padded_hw();
    let spread = dilate(gy, g.strides, [oh, ow]);
    let (dh, dw) = ((oh - 1) * g.strides[0] + 1, (ow - 1) * g.strides[1] + 1);
    // The last window ends inside the padded input, so these are never negative; the rows
    // past it (a stride that does not divide) get zero gradient.
    let (extra_h, extra_w) = (hp.saturating_sub(dh + kh - 1), wp.saturating_sub(dw + kw - 1));
    let padded = zero_pad(spread, &[(0, 0), (kh - 1, kh - 1 + extra_h), (kw - 1, kw - 1 + extra_w), (0, 0)]);
    let turned = B::float_swap_dims(B::float_flip(w, &[0, 1]), 2, 3);
    let unit = Geometry {
        kernel: [kh, kw],
        strides: [1, 1],
        pads: [0; 4],
        in_hw: [hp + kh - 1, wp + kw - 1],
        out_hw: [hp, wp],
    };
    let full = forward_all(padded, turned, &unit);
    if g.pads == [0; 4] {
        return full;
    }
    let c = full.shape()[3];
    B::float_slice(full, &[whole(n), range(pt, pt + g.in_hw[0], 1), range(pl, pl + g.in_hw[1], 1), whole(c)])
}

/// The batch in ranges of `chunk` examples (one range when it is the whole batch).
fn batches(n: usize, chunk: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let chunk = chunk.clamp(1, n.max(1));
    (0..n).step_by(chunk).map(move |start| start..(start + chunk).min(n))
}

fn slice_batch(t: &T, r: std::ops::Range<usize>) -> T {
    let d = t.shape().to_vec();
    if r.start == 0 && r.end == d[0] {
        return t.clone();
    }
    let mut ranges = vec![range(r.start, r.end, 1)];
    ranges.extend(d[1..].iter().map(|&n| whole(n)));
    B::float_slice(t.clone(), &ranges)
}

fn cat_batches(mut parts: Vec<T>) -> T {
    if parts.len() == 1 { parts.remove(0) } else { B::float_cat(parts, 0) }
}

/// `[n, oh, ow, kh · kw · c]`: each output position's window of the padded input, taps in
/// HWIO's order (row, column, channel), so that the filter reshaped to `[kh · kw · c, o]`
/// multiplies it.
fn patches(x: T, g: &Geometry) -> T {
    if let Some(cols) = kernel_patches(&x, g, Patches::Forward) {
        return cols;
    }
    let [n, _, _, c] = dims4(&x);
    let [pt, pb, pl, pr] = g.pads;
    let x = zero_pad(x, &[(0, 0), (pt, pb), (pl, pr), (0, 0)]);
    let ([kh, kw], [sh, sw], [oh, ow]) = (g.kernel, g.strides, g.out_hw);
    let mut taps: Vec<T> = (0..kh)
        .flat_map(|i| (0..kw).map(move |j| (i, j)))
        .map(|(i, j)| {
            let rows = range(i, i + (oh - 1) * sh + 1, sh);
            let cols = range(j, j + (ow - 1) * sw + 1, sw);
            B::float_slice(x.clone(), &[whole(n), rows, cols, whole(c)])
        })
        .collect();
    match taps.len() {
        1 => taps.remove(0),
        _ => B::float_cat(taps, 3),
    }
}

/// `gy` with `strides - 1` zeros between its rows and columns: `[n, (oh-1)·sh+1, (ow-1)·sw+1, o]`.
fn dilate(gy: T, strides: [usize; 2], out_hw: [usize; 2]) -> T {
    if strides == [1, 1] {
        return gy;
    }
    let ([n, _, _, o], [sh, sw], [oh, ow]) = (dims4(&gy), strides, out_hw);
    let gy = reshape(gy, &[n, oh, 1, ow, 1, o]);
    let spread = zero_pad(gy, &[(0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1), (0, 0)]);
    let spread = reshape(spread, &[n, oh * sh, ow * sw, o]);
    B::float_slice(spread, &[whole(n), range(0, (oh - 1) * sh + 1, 1), range(0, (ow - 1) * sw + 1, 1), whole(o)])
}

/// How many slices of the batch the filter gradient's GEMM is split into: the largest
/// divisor of the batch that keeps the partial products within [`SPLIT_OUTPUTS`].
fn splits(batch: usize, outputs: usize) -> usize {
    largest_divisor_at_most(batch, (SPLIT_OUTPUTS / outputs.max(1)).max(1)).unwrap_or(1)
}

fn dims4(t: &T) -> [usize; 4] {
    let d = t.shape();
    [d[0], d[1], d[2], d[3]]
}

fn reshape(t: T, dims: &[usize]) -> T {
    B::float_reshape(t, BurnShape::from(dims.to_vec()))
}

fn whole(n: usize) -> BurnSlice {
    range(0, n, 1)
}

fn range(start: usize, end: usize, step: usize) -> BurnSlice {
    BurnSlice::new(start as isize, Some(end as isize), step as isize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Precision;
    use crate::value::{float_from_f64, float_values};
    use burn::backend::ops::{ConvOptions, ModuleOps};
    use burn::backend::{DispatchDevice, FlexDevice};
    use engine_graph::ops::nn::Padding;

    fn cpu() -> DispatchDevice {
        DispatchDevice::Flex(FlexDevice)
    }

    /// flex, and each device named in `ENGINE_TEST_DEVICES` (`wgpu:0` on lavapipe), in the
    /// precision it computes in and the tolerance that goes with it; their turn held while
    /// iterated.
    fn devices() -> impl Iterator<Item = (String, DispatchDevice, Precision, f64)> {
        let devices = crate::device::test_devices().map(|(n, d)| (n, d, Precision::F32, 1e-4));
        std::iter::once(("flex".to_string(), cpu(), Precision::F64, 1e-9)).chain(devices)
    }

    fn tensor(dims: &[usize], seed: u64, device: &DispatchDevice, precision: Precision) -> T {
        let n: usize = dims.iter().product();
        let data = (0..n as u64).map(|i| (((i * 2_654_435_761 + seed * 97) % 1000) as f64 / 500.0) - 1.0).collect();
        float_from_f64(dims, data, device, precision)
    }

    /// burn's direct kernels on the CPU, through the same NHWC/HWIO permutes as `conv.rs`.
    fn reference(c: &Conv2d, x: &T, w: &T, gy: &T) -> [Vec<f64>; 3] {
        let (xd, wd) = (dims4(x), dims4(w));
        let (_, p) = c.window([wd[0], wd[1]]).output([xd[1], xd[2]]).unwrap();
        let opts =
            ConvOptions { stride: c.strides, padding: [(p[0], p[1]), (p[2], p[3])], dilation: [1, 1], groups: 1 };
        let xn = B::float_permute(x.clone(), &[0, 3, 1, 2]);
        let wn = B::float_permute(w.clone(), &[3, 2, 0, 1]);
        let gn = B::float_permute(gy.clone(), &[0, 3, 1, 2]);
        let y = B::float_permute(B::conv2d(xn.clone(), wn.clone(), None, opts.clone()), &[0, 2, 3, 1]);
        let gx =
            B::float_permute(B::conv2d_x_backward(xn.clone(), wn.clone(), gn.clone(), opts.clone()), &[0, 2, 3, 1]);
        let gw = B::float_permute(B::conv2d_weight_backward(xn, wn, gn, opts), &[2, 3, 1, 0]);
        [float_values(y), float_values(gx), float_values(gw)]
    }

    fn close(what: &str, got: &[f64], want: &[f64], tolerance: f64) {
        assert_eq!(got.len(), want.len(), "{what}: sizes");
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= tolerance * (1.0 + b.abs()), "{what}[{i}]: {a} against {b}");
        }
    }

    /// All three passes equal burn's direct convolutions, for strides that divide the
    /// input and strides that do not, valid and same padding, one tap and many.
    #[test]
    fn gemm_convolutions_equal_the_direct_kernels() {
        let cases = [
            ([2, 7, 6, 3], [3, 3, 3, 4], [1, 1], Padding::Valid),
            ([2, 7, 6, 3], [3, 3, 3, 4], [1, 1], Padding::Same),
            ([3, 9, 8, 2], [3, 2, 2, 5], [2, 2], Padding::Same),
            ([3, 9, 8, 2], [3, 3, 2, 5], [2, 3], Padding::Valid),
            ([2, 8, 8, 4], [1, 1, 4, 3], [2, 2], Padding::Valid),
            ([4, 5, 5, 1], [5, 5, 1, 2], [1, 1], Padding::Same),
            // The ResNet spec's downsampling: padding only after, and a 1x1 projection.
            ([2, 28, 28, 3], [3, 3, 3, 4], [2, 2], Padding::Same),
            ([2, 14, 14, 3], [3, 3, 3, 4], [2, 2], Padding::Same),
            ([2, 14, 14, 3], [1, 1, 3, 4], [2, 2], Padding::Valid),
        ];
        for (xd, wd, strides, padding) in cases {
            let c = Conv2d::plain(strides, padding);
            let g = Geometry::new(&c, [wd[0], wd[1]], [xd[1], xd[2]]).unwrap().unwrap();
            let gd = [xd[0], g.out_hw[0], g.out_hw[1], wd[3]];
            let on = |d: &DispatchDevice, p| (tensor(&xd, 1, d, p), tensor(&wd, 2, d, p), tensor(&gd, 3, d, p));
            let (x, w, gy) = on(&cpu(), Precision::F64);
            let [y, gx, gw] = reference(&c, &x, &w, &gy);
            for (name, device, precision, tolerance) in devices() {
                let (x, w, gy) = on(&device, precision);
                let case = format!("{name}: x {xd:?}, w {wd:?}, strides {strides:?}, {padding:?}");
                for chunk in [xd[0], 1] {
                    let case = format!("{case}, {chunk} per GEMM");
                    close(
                        &format!("{case}: y"),
                        &float_values(forward(x.clone(), w.clone(), &g, chunk)),
                        &y,
                        tolerance,
                    );
                    let dx = float_values(input_grad(w.clone(), gy.clone(), &g, chunk));
                    close(&format!("{case}: dx"), &dx, &gx, tolerance);
                    close(
                        &format!("{case}: dw"),
                        &float_values(filter_grad(x.clone(), gy.clone(), &g, chunk)),
                        &gw,
                        tolerance,
                    );
                }
            }
        }
    }

    /// On a cubecl device both patch matrices come from the one kernel (the test above
    /// then checks its values), and a tensor on flex is left to burn's ops. Under burn's
    /// `fusion` no device tensor is a cubecl buffer, and the ops build them everywhere.
    #[test]
    fn devices_build_their_patches_in_one_kernel() {
        if cfg!(feature = "fusion") {
            return;
        }
        let c = Conv2d::plain([2, 2], Padding::Same);
        let g = Geometry::new(&c, [3, 3], [9, 8]).unwrap().unwrap();
        let x = tensor(&[2, 9, 8, 3], 1, &cpu(), Precision::F32);
        assert!(kernel_patches(&x, &g, Patches::Forward).is_none(), "flex");
        for (name, device, precision, _) in devices().skip(1) {
            let x = tensor(&[2, 9, 8, 3], 1, &device, precision);
            let gy = tensor(&[2, g.out_hw[0], g.out_hw[1], 4], 3, &device, precision);
            let cols = kernel_patches(&x, &g, Patches::Forward).unwrap_or_else(|| panic!("{name}: forward"));
            assert_eq!(cols.shape().to_vec(), vec![2 * g.out_hw[0] * g.out_hw[1], 27], "{name}");
            let cols = kernel_patches(&gy, &g, Patches::Transposed).unwrap_or_else(|| panic!("{name}: transposed"));
            assert_eq!(cols.shape().to_vec(), vec![2 * 9 * 8, 36], "{name}");
        }
    }

    #[test]
    fn the_filter_gradient_splits_over_a_divisor_of_the_batch() {
        assert_eq!(splits(512, 288), 512);
        assert_eq!(splits(100, 1 << 19), 2);
        assert_eq!(splits(7, 1 << 19), 1);
        assert_eq!(splits(64, 1 << 22), 1);
        assert_eq!(splits(96, 20_000), 48);
    }

    #[test]
    fn a_batch_is_cut_into_chunks_that_fit() {
        assert_eq!(batch_chunk(64, 1000, 64_000), Some(64));
        assert_eq!(batch_chunk(64, 1000, 63_999), Some(32));
        assert_eq!(batch_chunk(250, 1000, 100_000), Some(50));
        assert_eq!(batch_chunk(7, 1000, 6_000), Some(1));
        assert_eq!(batch_chunk(7, 1000, 999), None);
    }

    #[test]
    fn grouped_and_dilated_convolutions_keep_burns_kernels() {
        let grouped = Conv2d { groups: 2, ..Conv2d::plain([1, 1], Padding::Valid) };
        let dilated = Conv2d { dilation: [2, 2], ..Conv2d::plain([1, 1], Padding::Valid) };
        assert_eq!(Geometry::new(&grouped, [3, 3], [8, 8]), Ok(None));
        assert_eq!(Geometry::new(&dilated, [3, 3], [8, 8]), Ok(None));
    }
}
