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
use crate::value::T;
use burn::backend::{BackendTensor, DispatchAutodiffContext, DispatchTensor, DispatchTensorKind};
use burn::tensor::{DType, Shape as BurnShape};
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, ir::AddressType};

type Cube = <burn::backend::Cube as burn::backend::BackendTypes>::FloatTensorPrimitive;

/// `[rows, kh · kw · channels]`, rows `(n, row_y, row_x)` in order and each row's taps in
/// HWIO's order (row, column, channel); `None` where `src` is not a float tensor in a
/// cubecl buffer of a type the kernel is built for (the caller builds it from burn's ops).
pub(super) fn patches(src: &T, g: &Geometry, how: Patches) -> Option<T> {
    let DispatchTensorKind::Cube(BackendTensor::Float(s)) = &src.kind else { return None };
    let elem = match s.dtype {
        DType::F32 => cubecl::ir::ElemType::Float(cubecl::ir::FloatKind::F32),
        DType::F64 => cubecl::ir::ElemType::Float(cubecl::ir::FloatKind::F64),
        _ => return None,
    };
    let d = s.meta.shape().to_vec();
    let [n, src_h, src_w, channels] = [d[0], d[1], d[2], d[3]];
    let ([kh, kw], [sh, sw], [pt, _, pl, _]) = (g.kernel, g.strides, g.pads);
    let [rows_h, rows_w] = match how {
        Patches::Forward => g.out_hw,
        Patches::Transposed => g.in_hw,
    };
    let width = kh * kw * channels;
    let total = n * rows_h * rows_w * width;
    let client = s.client.clone();
    let handle = client.empty(total * s.dtype.size());
    let out = Cube::new_contiguous(
        client.clone(),
        s.device.clone(),
        BurnShape::from(vec![n * rows_h * rows_w, width]),
        handle,
        s.dtype,
    );
    let cube_dim = CubeDim::new(&client, total);
    let cube_count = calculate_cube_count_elemwise(&client, total, cube_dim);
    let address = AddressType::from_len(total.max(s.handle.size() as usize / s.dtype.size()));
    let geometry = [rows_h, rows_w, src_h, src_w, channels, kw, sh, sw, pt, pl];
    let mut args = SequenceArg::new();
    for v in geometry {
        args.push(v);
    }
    // cubecl reports what it cannot launch by panicking: the caller then builds the patches
    // from burn's ops.
    let launched = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        patch_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            address,
            s.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            args,
            total,
            width,
            how == Patches::Transposed,
            elem,
        )
    }));
    launched.ok()?;
    Some(DispatchTensor { kind: DispatchTensorKind::Cube(BackendTensor::Float(out)), autodiff: DispatchAutodiffContext::Disabled })
}

/// One patch value per thread. `geometry` is `[rows_h, rows_w, src_h, src_w, channels, kw,
/// sh, sw, pt, pl]`; unsigned arithmetic, so a window position before the source is
/// tested before it is subtracted.
#[cube(launch_unchecked, address_type = "dynamic")]
fn patch_kernel<E: Numeric>(
    src: &Tensor<E>,
    cols: &mut Tensor<E>,
    geometry: Sequence<usize>,
    total: usize,
    width: usize,
    #[comptime] transposed: bool,
    #[define(E)] _elem: ElemType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= total {
        terminate!();
    }
    let rows_h = *geometry.index(0);
    let rows_w = *geometry.index(1);
    let src_h = *geometry.index(2);
    let src_w = *geometry.index(3);
    let channels = *geometry.index(4);
    let kw = *geometry.index(5);
    let sh = *geometry.index(6);
    let sw = *geometry.index(7);
    let pt = *geometry.index(8);
    let pl = *geometry.index(9);

    let row = pos / width;
    let col = pos % width;
    let tap = col / channels;
    let ch = col % channels;
    let i = tap / kw;
    let j = tap % kw;
    let per_example = rows_h * rows_w;
    let n = row / per_example;
    let at = row % per_example;
    let a = at / rows_w;
    let b = at % rows_w;

    let mut inside = false;
    let mut y = 0;
    let mut x = 0;
    if transposed {
        let ny = a + pt;
        let nx = b + pl;
        if ny >= i && nx >= j {
            let dy = ny - i;
            let dx = nx - j;
            y = dy / sh;
            x = dx / sw;
            inside = y * sh == dy && x * sw == dx && y < src_h && x < src_w;
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
    let mut value = E::from_int(0);
    if inside {
        value = src[n * src.stride(0) + y * src.stride(1) + x * src.stride(2) + ch * src.stride(3)];
    }
    cols[pos] = value;
}
