//! Convolution, pooling and dropout (small NHWC shapes, both paddings, strides).

use crate::harness::{check, input};
use anyhow::Result;
use engine_graph::ops::{Conv2d, Padding, Window};

fn win(k: usize, s: usize, padding: Padding) -> Window {
    Window { kernel: [k, k], strides: [s, s], padding }
}

#[test]
fn conv2d_valid() -> Result<()> {
    check(&[input(&[2, 5, 5, 2]), input(&[3, 3, 2, 3])], |b, x| b.conv2d(x[0], x[1], [1, 1], Padding::Valid))
}

#[test]
fn conv2d_same_strided_asymmetric() -> Result<()> {
    // 6 wide, kernel 2, stride 2 -> SAME pads nothing; 5 wide, kernel 2 -> pads one after.
    check(&[input(&[1, 5, 6, 2]), input(&[2, 2, 2, 2])], |b, x| b.conv2d(x[0], x[1], [2, 2], Padding::Same))?;
    check(&[input(&[1, 5, 5, 1]), input(&[3, 3, 1, 2])], |b, x| b.conv2d(x[0], x[1], [1, 1], Padding::Same))?;
    // Stride 1 with an even kernel: SAME pads one row and column after only, so the input
    // gradient (a convolution of the padded output gradient) is padded one before only.
    check(&[input(&[2, 4, 5, 3]), input(&[2, 4, 3, 2])], |b, x| b.conv2d(x[0], x[1], [1, 1], Padding::Same))
}

/// 3×3 stride-1 windows over 32 channels in and out run on the Winograd F(2×2, 3×3)
/// kernels: the forward product, the input gradient (itself such a convolution) and the
/// filter gradient. Odd sizes leave partial tiles at the right and bottom edges.
#[test]
fn conv2d_winograd_sized() -> Result<()> {
    check(&[input(&[1, 3, 5, 32]), input(&[3, 3, 32, 32])], |b, x| b.conv2d(x[0], x[1], [1, 1], Padding::Same))?;
    check(&[input(&[2, 5, 4, 32]), input(&[3, 3, 32, 32])], |b, x| b.conv2d(x[0], x[1], [1, 1], Padding::Valid))
}

/// Atrous (dilated) and grouped convolutions, depthwise included, in both paddings: the
/// generic kernels (the native ones decline these) and their backprop ops' second order.
#[test]
fn conv2d_dilated_and_grouped() -> Result<()> {
    let conv = |padding, dilation, groups| Conv2d { strides: [1, 1], padding, dilation, groups };
    let dilated = conv(Padding::Valid, [2, 2], 1);
    check(&[input(&[1, 6, 7, 2]), input(&[2, 3, 2, 2])], |b, x| b.conv2d_general(x[0], x[1], dilated.clone()))?;
    let same = conv(Padding::Same, [2, 1], 1);
    check(&[input(&[1, 5, 5, 1]), input(&[3, 3, 1, 2])], |b, x| b.conv2d_general(x[0], x[1], same.clone()))?;
    // 4 channels in 2 groups, 4 filters: each group maps 2 channels to 2 filters.
    let grouped = conv(Padding::Valid, [1, 1], 2);
    check(&[input(&[2, 4, 4, 4]), input(&[2, 2, 2, 4])], |b, x| b.conv2d_general(x[0], x[1], grouped.clone()))?;
    // Depthwise with a channel multiplier of 2, SAME and dilated.
    let depthwise = conv(Padding::Same, [2, 2], 3);
    check(&[input(&[1, 5, 5, 3]), input(&[3, 3, 1, 6])], |b, x| b.conv2d_general(x[0], x[1], depthwise.clone()))?;
    // The backprop ops' own gradients (second order) keep dilation and groups.
    check(&[input(&[2, 2, 2, 4]), input(&[2, 3, 3, 4])], |b, x| {
        b.op(grouped.backprop_input([4, 4]).into(), &[x[0], x[1]])
    })?;
    check(&[input(&[1, 6, 7, 2]), input(&[1, 4, 3, 2])], |b, x| {
        b.op(dilated.backprop_filter([2, 3]).into(), &[x[0], x[1]])
    })
}

#[test]
fn conv2d_backprop_input_second_order() -> Result<()> {
    check(&[input(&[3, 3, 2, 3]), input(&[2, 3, 3, 3])], |b, x| {
        b.conv2d_backprop_input(x[0], x[1], [5, 5], [1, 1], Padding::Valid)
    })
}

#[test]
fn conv2d_backprop_filter_second_order() -> Result<()> {
    check(&[input(&[2, 5, 5, 2]), input(&[2, 3, 3, 3])], |b, x| {
        b.conv2d_backprop_filter(x[0], x[1], [3, 3], [1, 1], Padding::Valid)
    })
}

#[test]
fn max_pool2d() -> Result<()> {
    check(&[input(&[2, 4, 4, 3])], |b, x| b.max_pool2d(x[0], win(2, 2, Padding::Valid)))?;
    check(&[input(&[1, 5, 5, 2])], |b, x| b.max_pool2d(x[0], win(2, 2, Padding::Same)))?;
    check(&[input(&[1, 5, 5, 1])], |b, x| b.max_pool2d(x[0], win(3, 1, Padding::Same)))
}

#[test]
fn avg_pool2d() -> Result<()> {
    check(&[input(&[2, 4, 4, 3])], |b, x| b.avg_pool2d(x[0], win(2, 2, Padding::Valid)))?;
    check(&[input(&[1, 5, 5, 2])], |b, x| b.avg_pool2d(x[0], win(2, 2, Padding::Same)))?;
    check(&[input(&[1, 5, 5, 1])], |b, x| b.avg_pool2d(x[0], win(3, 1, Padding::Same)))
}

#[test]
fn avg_pool2d_grad_second_order() -> Result<()> {
    check(&[input(&[1, 3, 3, 2])], |b, x| b.avg_pool2d_grad(x[0], [5, 5], win(2, 2, Padding::Same)))
}

#[test]
fn dropout_with_a_fixed_mask() -> Result<()> {
    check(&[input(&[4, 6])], |b, x| b.dropout(x[0], 0.5, 11))
}
