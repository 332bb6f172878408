//! The fused convolution block of `FuseConvPool`: each image's convolution output is made
//! in a per-thread scratch buffer (a few hundred kilobytes, in cache), pooled from there
//! forward, and its gradient rebuilt there from the pooled one backward; the batch-sized
//! tensor between convolution and pooling is never written to memory.

use super::{
    buffer::{Elem, argmax_cells, argmax_tensor, min_len, sum_chunks, tensor, view, zeroed},
    buffer::{as_f32, as_f32_mut, as_f32_uninit},
    conv::Method,
    conv::{Geometry, conv_image, conv_image_plus, filter_grad_image},
    direct_conv::taps_f32,
    microkernel::{MAX_POOLED_TAPS, pooled_filter_grad_f32},
    patches::PatchIndex,
    pool::{Plane, pool_image, unpool_plane},
    pooled_conv::{conv_max_pool_f32, forward_applies},
    simd::prefetch_next_image,
    winograd::forward_pooled,
};
use crate::{
    Result, Value,
    kernels::{KernelCtx, dims},
    value::T,
};
use engine_graph::ops::{FusedActivation, FusedConv2dMaxPool, FusedMaxPoolConv2dBackpropFilter};
use rayon::prelude::*;
use std::mem::MaybeUninit;

fn shape4(t: &T, what: &str, ctx: &KernelCtx<'_>) -> Result<[usize; 4]> {
    dims(t).try_into().map_err(|_| ctx.err(format!("{what} must have rank 4")))
}

/// `(pooled, argmax)` of `activation(conv(x, w) + bias [+ skip])`.
pub(super) fn forward<E: Elem>(op: &FusedConv2dMaxPool, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let (x, w, b, skip) = if op.residual {
        let [x, w, b, s] = ctx.floats(inputs)?;
        (x, w, b, Some(s))
    } else {
        let [x, w, b] = ctx.floats(inputs)?;
        (x, w, b, None)
    };
    let [n, h, wd, ch] = shape4(&x, "input", ctx)?;
    let [kh, kw, _, f] = shape4(&w, "filter", ctx)?;
    let g = Geometry::new(n, [h, wd], ch, [kh, kw], op.strides, op.padding, ctx)?;
    let pl = Plane::new(&op.pool, [g.oh, g.ow], f, ctx)?;
    let (xs, ws, bias) = (view::<E>(&x), view::<E>(&w), view::<E>(&b));
    if bias.len() != f {
        return Err(ctx.err("bias length differs from the output channels"));
    }
    let skip = skip.as_ref().map(view::<E>);
    let image = g.pixels() * f;
    if skip.as_ref().is_some_and(|s| s.len() != n * image) {
        return Err(ctx.err("the addend's size differs from the convolution's output"));
    }
    // Left uninitialized: each image's part is written in full by the kernel in registers,
    // or zeroed in cache right before the general path writes it.
    let total = n * pl.pooled();
    let mut pooled: Vec<E> = Vec::with_capacity(total);
    let mut argmax: Vec<i32> = Vec::with_capacity(total);
    let threads = if n == 1 { rayon::current_num_threads() } else { 1 };
    let method = Method::of(&g, f);
    let ws = method.filter(&ws, ch, f);
    let ok = pooled.spare_capacity_mut()[..total]
        .par_chunks_mut(pl.pooled())
        .zip(argmax.spare_capacity_mut()[..total].par_chunks_mut(pl.pooled()))
        .zip(xs.par_chunks(g.image()))
        .enumerate()
        .with_min_len(min_len())
        .map_init(
            || (Vec::new(), Vec::new(), vec![0i32; f]),
            |(y, cols, pos), (i, ((out, arg), x))| {
                prefetch_next_image(&xs, i, g.image());
                if let Some(s) = &skip {
                    prefetch_next_image(s, i, image);
                }
                if let (Method::Direct(index), None) = (&method, &skip)
                    && pooled_in_registers(x, &g, index, &ws, &bias, op.activation, &pl, out, arg, cols)
                {
                    return true;
                }
                if let Method::Winograd(tile) = &method
                    && pl.halves()
                    && forward_pooled(
                        *tile,
                        x,
                        &g,
                        &ws,
                        f,
                        (&bias[..], op.activation),
                        skip.as_ref().map(|s| &s[i * image..][..image]),
                        out,
                        arg,
                        cols,
                        threads,
                    )
                {
                    return true;
                }
                let (out, arg) = (zeroed(out), zeroed(arg));
                // The convolution's plane, made only where it is not kept in registers.
                y.resize(image, E::zero());
                let post = Some((&bias[..], op.activation));
                let ok = match &skip {
                    None => conv_image(x, &g, &method, &ws, f, post, y, cols, threads),
                    Some(s) => {
                        conv_image_plus(x, &g, &method, &ws, f, post, &s[i * image..][..image], y, cols, threads)
                    }
                };
                pool_image(y, out, arg, pos, &pl);
                ok
            },
        )
        .all(|ok| ok);
    if !ok {
        return Err(ctx.err("matrix sizes do not fit the buffers"));
    }
    // SAFETY: every image's part of both was written (the kernel in registers writes all of
    // it when it returns true; otherwise it was zeroed), and `ok` says every image ran.
    unsafe {
        pooled.set_len(total);
        argmax.set_len(total);
    }
    let shape = [n, pl.oh, pl.ow, f];
    Ok(vec![Value::Float(tensor(pooled, &shape, ctx.device)), Value::Int(argmax_tensor(argmax, &shape, ctx.device))])
}

/// The filter gradient (and bias gradient) from `(x, pooled, argmax, pooled gradient)`.
pub(super) fn backprop_filter<E: Elem>(
    op: &FusedMaxPoolConv2dBackpropFilter,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<Vec<Value>> {
    let mut it = inputs.into_iter();
    let (Some(Value::Float(x)), Some(Value::Float(pooled)), Some(Value::Int(idx)), Some(Value::Float(gp))) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(ctx.err("expected (input, pooled values, argmax, gradient)"));
    };
    let [n, h, wd, ch] = shape4(&x, "input", ctx)?;
    let f = dims(&gp).last().copied().unwrap_or(0);
    let g = Geometry::new(n, [h, wd], ch, op.filter_hw, op.strides, op.padding, ctx)?;
    if [g.oh, g.ow] != op.conv_hw {
        return Err(ctx.err("the convolution's output does not match the pooling's input"));
    }
    let pl = Plane::new(&op.pool, op.conv_hw, f, ctx)?;
    let (xs, ps, idx, gps) = (view::<E>(&x), view::<E>(&pooled), argmax_cells(&idx), view::<E>(&gp));
    if gps.len() != n * pl.pooled() || idx.len() != gps.len() || ps.len() != gps.len() {
        return Err(ctx.err("argmax, pooled values and gradient do not match the pooling"));
    }
    let (p, pooled_len) = (g.pixels(), pl.pooled());
    let plane = (pl.h * pl.w) as i64;
    let per_task = sum_chunks(n);
    let method = Method::of(&g, f);
    let shape = [g.kh, g.kw, ch, f];
    let partials: Vec<Option<(Vec<E>, Vec<E>)>> = (0..n.div_ceil(per_task))
        .into_par_iter()
        .with_min_len(min_len())
        .map(|t| {
            let mut acc = vec![E::zero(); method.grad_len(shape)];
            let mut bias = vec![E::zero(); if op.with_bias { f } else { 0 }];
            let (mut dy, mut cols) = (vec![E::zero(); p * f], Vec::new());
            for i in t * per_task..((t + 1) * per_task).min(n) {
                let (a, gpi, pi) = (
                    &idx[i * pooled_len..][..pooled_len],
                    &gps[i * pooled_len..][..pooled_len],
                    &ps[i * pooled_len..][..pooled_len],
                );
                let mask = op.relu_mask.then_some(pi);
                let xi = &xs[i * g.image()..][..g.image()];
                if let Method::Direct(index) = &method
                    && in_registers(xi, &g, index, a, gpi, mask, &pl, &mut acc, &mut bias, &mut cols)
                {
                    continue;
                }
                dy.iter_mut().for_each(|v| *v = E::zero());
                unpool_plane(&mut dy, a, gpi, &pl, mask);
                if !filter_grad_image(xi, &g, &method, &dy, f, &mut acc, &mut [], &mut cols) {
                    return None;
                }
                if op.with_bias {
                    // The unpooled gradient holds exactly the kept pooled gradients.
                    for (q, grow) in gpi.chunks_exact(f).enumerate() {
                        for (c, (b, &v)) in bias.iter_mut().zip(grow).enumerate() {
                            let kept = (0..plane).contains(&i64::from(a[q * f + c]))
                                && mask.is_none_or(|m| m[q * f + c] > E::zero());
                            if kept {
                                *b += v;
                            }
                        }
                    }
                }
            }
            Some((acc, bias))
        })
        .collect();
    super::conv::sum_filter_grads(partials, op.with_bias, &method, shape, ctx)
}

/// The f32 SIMD path of the fused forward for one image: convolution and pooling in
/// registers (see `pooled_conv`). False when it does not apply.
#[allow(clippy::too_many_arguments)]
fn pooled_in_registers<E: Elem>(
    x: &[E],
    g: &Geometry,
    index: &PatchIndex,
    w: &[E],
    bias: &[E],
    act: FusedActivation,
    pl: &Plane,
    pooled: &mut [MaybeUninit<E>],
    argmax: &mut [MaybeUninit<i32>],
    padded: &mut Vec<E>,
) -> bool {
    let k = g.patch();
    if !forward_applies(k, pl) {
        return false;
    }
    let image = index.image(x, g, padded);
    let (Some(taps), Some(w), Some(bias), Some(out)) =
        (taps_f32(image, index), as_f32(w), as_f32(bias), as_f32_uninit(pooled))
    else {
        return false;
    };
    conv_max_pool_f32(taps, k, w, bias, act == FusedActivation::Relu, pl, out, argmax)
}

/// The f32 SIMD path of the fused backward for one image: the unpooled gradient is built in
/// registers and multiplied by the image's patch matrix at once (see
/// `microkernel::pooled_filter_grad_f32`). False when it does not apply.
#[allow(clippy::too_many_arguments)]
fn in_registers<E: Elem>(
    x: &[E],
    g: &Geometry,
    index: &PatchIndex,
    argmax: &[i32],
    gradient: &[E],
    mask: Option<&[E]>,
    pl: &Plane,
    acc: &mut [E],
    bias: &mut [E],
    padded: &mut Vec<E>,
) -> bool {
    let k = g.patch();
    if k > MAX_POOLED_TAPS || !pl.c.is_multiple_of(8) {
        return false;
    }
    let image = index.image(x, g, padded);
    let (Some(taps), Some(gr), Some(out)) = (taps_f32(image, index), as_f32(gradient), as_f32_mut(acc)) else {
        return false;
    };
    let mask = match mask {
        Some(p) => match as_f32(p) {
            Some(p) => Some(p),
            None => return false,
        },
        None => None,
    };
    let bias = if bias.is_empty() { None } else { as_f32_mut(bias) };
    pooled_filter_grad_f32(taps, k, argmax, gr, mask, pl, out, bias)
}

#[cfg(test)]
mod probe {
    use super::super::buffer::as_uninit;
    use super::*;
    use engine_graph::ops::{Padding, Window};

    #[test]
    #[ignore = "timing probe"]
    fn conv_pool_probe() -> Result<()> {
        let ctx_free = |r: std::result::Result<Plane, crate::RuntimeError>| r;
        let g = Geometry { n: 64, h: 28, w: 28, c: 1, kh: 3, kw: 3, oh: 26, ow: 26, sh: 1, sw: 1, top: 0, left: 0 };
        let win = Window { kernel: [2, 2], strides: [2, 2], padding: Padding::Valid };
        let pl = ctx_free(Plane::for_probe(&win, [26, 26], 32))?;
        let x: Vec<f32> = (0..784).map(|i| (i % 17) as f32 - 8.0).collect();
        let w: Vec<f32> = (0..9 * 32).map(|i| (i % 5) as f32 - 2.0).collect();
        let bias = vec![0.5f32; 32];
        let (mut y, mut cols, mut pos) = (vec![0.0f32; 676 * 32], Vec::new(), vec![0i32; 32]);
        let (mut out, mut arg) = (vec![0.0f32; 169 * 32], vec![0i32; 169 * 32]);
        let mut dy = vec![0.0f32; 676 * 32];
        let mut acc = vec![0.0f32; 9 * 32];
        let method = Method::of(&g, 32);
        let index = PatchIndex::new(&g);
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..64 {
                conv_image(&x, &g, &method, &w, 32, Some((&bias, FusedActivation::Relu)), &mut y, &mut cols, 1);
            }
            let conv = t.elapsed();
            let t = std::time::Instant::now();
            for _ in 0..64 {
                pool_image(&y, &mut out, &mut arg, &mut pos, &pl);
            }
            let pool = t.elapsed();
            let t = std::time::Instant::now();
            if let Method::Direct(index) = &method {
                for _ in 0..64 {
                    let w = &w[..];
                    // SAFETY: the kernel writes only initialized values.
                    let (o, a) = unsafe { (as_uninit(&mut out), as_uninit(&mut arg)) };
                    pooled_in_registers(&x, &g, index, w, &bias, FusedActivation::Relu, &pl, o, a, &mut cols);
                }
            }
            let fused = t.elapsed();
            let t = std::time::Instant::now();
            for _ in 0..64 {
                dy.iter_mut().for_each(|v| *v = 0.0);
                crate::kernels::cpu::pool::unpool_image(&mut dy, &arg, &out, 32, 676, Some(&out));
            }
            let unpool = t.elapsed();
            let t = std::time::Instant::now();
            for _ in 0..64 {
                filter_grad_image(&x, &g, &method, &dy, 32, &mut acc, &mut [], &mut cols);
            }
            let grad = t.elapsed();
            let t = std::time::Instant::now();
            let mut bias_acc = vec![0.0f32; 32];
            for _ in 0..64 {
                in_registers(&x, &g, &index, &arg, &out, Some(&out), &pl, &mut acc, &mut bias_acc, &mut cols);
            }
            println!(
                "conv {conv:?} pool {pool:?} (in registers {fused:?}) unpool {unpool:?} filter grad {grad:?} fused grad {:?} (64 images)",
                t.elapsed()
            );
        }
        Ok(())
    }
}
