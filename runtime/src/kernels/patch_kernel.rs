//! A convolution's patch matrix built by one cubecl kernel, read straight from the
//! unpadded NHWC tensor.
//!
//! Why: built from burn's ops, the forward pass's patches cost a padded copy of the input
//! (a fill and a copy) and one strided copy per filter tap into a concatenation, and the
//! input gradient's cost more: the output gradient spread by the strides, padded by the
//! filter, its patches over the whole padded input, and a crop. On an H200 those slices,
//! copies and fills were 38 % of a ResNet step's kernel time, five times the GEMMs
//! they feed (`ncu`, BENCHMARKS.md). One thread per patch value, reading the source
//! where the window lands and writing zero where it falls in the padding (or, for the
//! input gradient, between a stride's steps), writes each value once and reads nothing
//! else.

use super::conv_gemm::{Geometry, Patches};
use crate::device::cube::{empty_contiguous, float_buffer, float_tensor, launched};
use crate::value::T;
use cubecl::prelude::*;
use cubecl::std::FastDivmod;
use cubecl::{calculate_cube_count_elemwise, ir::AddressType};

/// `[rows, kh · kw · channels]`, rows `(n, row_y, row_x)` in order and each row's taps in
/// HWIO's order (row, column, channel); `None` where `src` is not a rank-4 float tensor in
/// a cubecl buffer of a type the kernel is built for, or the launch is refused (the caller
/// builds it from burn's ops).
pub(super) fn patches(src: &T, g: &Geometry, how: Patches) -> Option<T> {
    let (s, elem) = float_buffer(src)?;
    let &[n, src_h, src_w, channels] = &s.meta.shape().to_vec()[..] else { return None };
    let ([kh, kw], [sh, sw], [pt, _, pl, _]) = (g.kernel, g.strides, g.pads);
    let [rows_h, rows_w] = match how {
        Patches::Forward => g.out_hw,
        Patches::Transposed => g.in_hw,
    };
    let width = kh * kw * channels;
    let total = n * rows_h * rows_w * width;
    let client = s.client.clone();
    let out = empty_contiguous(s, vec![n * rows_h * rows_w, width]);
    // Each thread writes up to four neighbouring channels of one tap, so the index
    // arithmetic is shared by them.
    let per_thread = [4, 2, 1].into_iter().find(|v| channels.is_multiple_of(*v)).unwrap_or(1);
    let threads = total / per_thread;
    let cube_dim = CubeDim::new(&client, threads);
    let cube_count = calculate_cube_count_elemwise(&client, threads, cube_dim);
    let address = AddressType::from_len(total.max(s.handle.size() as usize / s.dtype.size()));
    let mut divisors = SequenceArg::new();
    for v in [width, channels, kw, rows_h * rows_w, rows_w, sh, sw] {
        divisors.push(v);
    }
    let mut bounds = SequenceArg::new();
    for v in [src_h, src_w, sh, sw, pt, pl] {
        bounds.push(v);
    }
    let ok = launched(|| unsafe {
        patch_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            address,
            s.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            divisors,
            bounds,
            threads,
            per_thread,
            how == Patches::Transposed,
            elem,
        )
    });
    ok.then(|| float_tensor(out))
}

/// `per_thread` neighbouring patch values (channels of one tap) per thread. `divisors` is
/// `[width, channels, kw, rows per example, rows_w, sh, sw]`, `bounds` `[src_h, src_w, sh,
/// sw, pt, pl]`; the arithmetic is unsigned, so a window position before the source is
/// tested before it is subtracted.
#[cube(launch_unchecked, address_type = "dynamic")]
fn patch_kernel<E: Numeric>(
    src: &Tensor<E>,
    cols: &mut Tensor<E>,
    divisors: Sequence<FastDivmod<usize>>,
    bounds: Sequence<usize>,
    threads: usize,
    #[comptime] per_thread: usize,
    #[comptime] transposed: bool,
    #[define(E)] _elem: ElemType,
) {
    if ABSOLUTE_POS >= threads {
        terminate!();
    }
    let pos = ABSOLUTE_POS * per_thread;
    let (row, col) = divisors.index(0).div_mod(pos);
    let (tap, ch) = divisors.index(1).div_mod(col);
    let (i, j) = divisors.index(2).div_mod(tap);
    let (n, at) = divisors.index(3).div_mod(row);
    let (a, b) = divisors.index(4).div_mod(at);
    let src_h = *bounds.index(0);
    let src_w = *bounds.index(1);
    let sh = *bounds.index(2);
    let sw = *bounds.index(3);
    let pt = *bounds.index(4);
    let pl = *bounds.index(5);

    let mut inside = false;
    let mut y = 0;
    let mut x = 0;
    if transposed {
        let ny = a + pt;
        let nx = b + pl;
        if ny >= i && nx >= j {
            let (qy, ry) = divisors.index(5).div_mod(ny - i);
            let (qx, rx) = divisors.index(6).div_mod(nx - j);
            y = qy;
            x = qx;
            inside = ry == 0 && rx == 0 && y < src_h && x < src_w;
        }
    } else {
        let ny = a * sh + i;
        let nx = b * sw + j;
        if ny >= pt && nx >= pl {
            y = ny - pt;
            x = nx - pl;
            inside = y < src_h && x < src_w;
        }
    }
    let step = src.stride(3);
    let base = n * src.stride(0) + y * src.stride(1) + x * src.stride(2) + ch * step;
    #[unroll]
    for k in 0..per_thread {
        let mut value = E::from_int(0);
        if inside {
            value = src[base + k * step];
        }
        cols[pos + k] = value;
    }
}
