//! Convolution as patch matrices times the filter: `y = im2col(x) · W`, with the HWIO
//! filter read as a `(kh*kw*c) x f` matrix in place. Backward: `dW = Σ im2col(x)ᵀ · dy`
//! and `dx = col2im(dy · Wᵀ)`. Work is split by image across the rayon pool; filter
//! gradients are summed in a fixed order so results do not depend on timing.

use super::{
    buffer::{Elem, chunks, tensor, view},
    gemm::{Mat, gemm},
};
use crate::{Result, Value, kernels::KernelCtx, value::T};
use engine_graph::ops::{Conv2d, Conv2dBackpropFilter, Conv2dBackpropInput, Padding, Window};
use rayon::prelude::*;

/// The sizes of one convolution.
#[derive(Clone, Copy)]
struct Geometry {
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    sh: usize,
    sw: usize,
    top: usize,
    left: usize,
}

impl Geometry {
    fn new(n: usize, hw: [usize; 2], c: usize, k: [usize; 2], strides: [usize; 2], padding: Padding, ctx: &KernelCtx<'_>) -> Result<Self> {
        let win = Window { kernel: k, strides, padding };
        let ([oh, ow], p) = win.output(hw).map_err(|e| ctx.err(e))?;
        Ok(Geometry { n, h: hw[0], w: hw[1], c, kh: k[0], kw: k[1], oh, ow, sh: strides[0], sw: strides[1], top: p[0], left: p[2] })
    }
    fn patch(&self) -> usize {
        self.kh * self.kw * self.c
    }
    fn pixels(&self) -> usize {
        self.oh * self.ow
    }
    fn image(&self) -> usize {
        self.h * self.w * self.c
    }
}

/// Rows of output pixels, columns of (ky, kx, channel) taps; zeros where the window
/// leaves the image.
fn im2col<E: Elem>(x: &[E], g: &Geometry, cols: &mut [E]) {
    let k = g.patch();
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            let row = &mut cols[(oy * g.ow + ox) * k..][..k];
            for ky in 0..g.kh {
                let iy = (oy * g.sh + ky) as isize - g.top as isize;
                for kx in 0..g.kw {
                    let ix = (ox * g.sw + kx) as isize - g.left as isize;
                    let dst = &mut row[(ky * g.kw + kx) * g.c..][..g.c];
                    if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                        dst.iter_mut().for_each(|v| *v = E::zero());
                    } else {
                        dst.copy_from_slice(&x[(iy as usize * g.w + ix as usize) * g.c..][..g.c]);
                    }
                }
            }
        }
    }
}

/// The adjoint of `im2col`: adds every patch row back onto the pixels it came from.
fn col2im<E: Elem>(cols: &[E], g: &Geometry, x: &mut [E]) {
    let k = g.patch();
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            let row = &cols[(oy * g.ow + ox) * k..][..k];
            for ky in 0..g.kh {
                let iy = (oy * g.sh + ky) as isize - g.top as isize;
                if iy < 0 || iy >= g.h as isize {
                    continue;
                }
                for kx in 0..g.kw {
                    let ix = (ox * g.sw + kx) as isize - g.left as isize;
                    if ix < 0 || ix >= g.w as isize {
                        continue;
                    }
                    let src = &row[(ky * g.kw + kx) * g.c..][..g.c];
                    let dst = &mut x[(iy as usize * g.w + ix as usize) * g.c..][..g.c];
                    dst.iter_mut().zip(src).for_each(|(d, s)| *d += *s);
                }
            }
        }
    }
}

fn shape4(v: &[usize], what: &str, ctx: &KernelCtx<'_>) -> Result<[usize; 4]> {
    v.try_into().map_err(|_| ctx.err(format!("{what} must have rank 4, got {v:?}")))
}

/// Threads for each gemm: the pool when there is one image, else one per image task.
fn inner_threads(g: &Geometry) -> usize {
    if g.n == 1 { rayon::current_num_threads() } else { 1 }
}

pub(super) fn forward<E: Elem>(c: &Conv2d, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x, w] = ctx.floats(inputs)?;
    let [n, h, wd, ch] = shape4(&super::super::dims(&x), "input", ctx)?;
    let [kh, kw, _, f] = shape4(&super::super::dims(&w), "filter", ctx)?;
    let g = Geometry::new(n, [h, wd], ch, [kh, kw], c.strides, c.padding, ctx)?;
    let (xs, ws) = (view::<E>(&x), view::<E>(&w));
    let (p, k) = (g.pixels(), g.patch());
    let mut out = vec![E::zero(); n * p * f];
    let threads = inner_threads(&g);
    let ok = out
        .par_chunks_mut(p * f)
        .zip(xs.par_chunks(g.image()))
        .map_init(|| vec![E::zero(); p * k], |cols, (y, x)| {
            im2col(x, &g, cols);
            gemm(p, f, k, y, false, Mat::row_major(cols, k), Mat::row_major(&ws, f), threads)
        })
        .all(|ok| ok);
    if !ok {
        return Err(ctx.err("matrix sizes do not fit the buffers"));
    }
    Ok(tensor(out, &[n, g.oh, g.ow, f], ctx.device))
}

pub(super) fn backprop_filter<E: Elem>(c: &Conv2dBackpropFilter, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x, gy] = ctx.floats(inputs)?;
    let [n, h, wd, ch] = shape4(&super::super::dims(&x), "input", ctx)?;
    let f = super::super::dims(&gy).last().copied().unwrap_or(0);
    let g = Geometry::new(n, [h, wd], ch, c.filter_hw, c.strides, c.padding, ctx)?;
    let (xs, gys) = (view::<E>(&x), view::<E>(&gy));
    let (p, k) = (g.pixels(), g.patch());
    if gys.len() != n * p * f {
        return Err(ctx.err("output gradient does not match the convolution"));
    }
    let per_task = chunks(n);
    let partials: Vec<Option<Vec<E>>> = (0..n.div_ceil(per_task))
        .into_par_iter()
        .map(|t| {
            let mut acc = vec![E::zero(); k * f];
            let mut cols = vec![E::zero(); p * k];
            for i in t * per_task..((t + 1) * per_task).min(n) {
                im2col(&xs[i * g.image()..][..g.image()], &g, &mut cols);
                let dy = Mat::row_major(&gys[i * p * f..][..p * f], f);
                if !gemm(k, f, p, &mut acc, true, Mat::transposed(&cols, k), dy, 1) {
                    return None;
                }
            }
            Some(acc)
        })
        .collect();
    let mut total = vec![E::zero(); k * f];
    for part in partials {
        let part = part.ok_or_else(|| ctx.err("matrix sizes do not fit the buffers"))?;
        total.iter_mut().zip(part).for_each(|(t, v)| *t += v);
    }
    Ok(tensor(total, &[g.kh, g.kw, ch, f], ctx.device))
}

pub(super) fn backprop_input<E: Elem>(c: &Conv2dBackpropInput, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [w, gy] = ctx.floats(inputs)?;
    let [kh, kw, ch, f] = shape4(&super::super::dims(&w), "filter", ctx)?;
    let n = super::super::dims(&gy).first().copied().unwrap_or(0);
    let g = Geometry::new(n, c.input_hw, ch, [kh, kw], c.strides, c.padding, ctx)?;
    let (ws, gys) = (view::<E>(&w), view::<E>(&gy));
    let (p, k) = (g.pixels(), g.patch());
    if gys.len() != n * p * f {
        return Err(ctx.err("output gradient does not match the convolution"));
    }
    let mut out = vec![E::zero(); n * g.image()];
    let threads = inner_threads(&g);
    let ok = out
        .par_chunks_mut(g.image())
        .zip(gys.par_chunks(p * f))
        .map_init(|| vec![E::zero(); p * k], |cols, (dx, dy)| {
            let ok = gemm(p, k, f, cols, false, Mat::row_major(dy, f), Mat::transposed(&ws, f), threads);
            col2im(cols, &g, dx);
            ok
        })
        .all(|ok| ok);
    if !ok {
        return Err(ctx.err("matrix sizes do not fit the buffers"));
    }
    Ok(tensor(out, &[n, g.h, g.w, ch], ctx.device))
}
