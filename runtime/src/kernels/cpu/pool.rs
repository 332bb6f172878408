//! Pooling directly in NHWC, one image per task, channels innermost so the inner loops
//! run over contiguous memory. Windows are clipped to the image (TensorFlow's SAME
//! semantics: max over real cells, average over real cells).

use super::{
    buffer::{Elem, argmax_cells, argmax_tensor, as_f32, as_f32_mut, min_len, tensor, view, zeroed},
    simd::{OutputLines, multiversion},
    unpool512::{Relu, unpool_f32},
};
use crate::{
    Result, Value,
    kernels::{KernelCtx, dims},
    value::T,
};
use engine_graph::ops::{AvgPool2dGrad, MaxPoolGradWithArgmax, Window};
use rayon::prelude::*;

pub(super) struct Plane {
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub oh: usize,
    pub ow: usize,
    win: Window,
    top: usize,
    left: usize,
}

impl Plane {
    pub(super) fn new(win: &Window, hw: [usize; 2], c: usize, ctx: &KernelCtx<'_>) -> Result<Self> {
        let ([oh, ow], p) = win.output(hw).map_err(|e| ctx.err(e))?;
        Ok(Plane { h: hw[0], w: hw[1], c, oh, ow, win: *win, top: p[0], left: p[2] })
    }

    #[cfg(test)]
    pub(super) fn for_probe(win: &Window, hw: [usize; 2], c: usize) -> Result<Self> {
        let ([oh, ow], p) =
            win.output(hw).map_err(|e| crate::RuntimeError::Kernel { node: "probe".into(), op: "probe", reason: e })?;
        Ok(Plane { h: hw[0], w: hw[1], c, oh, ow, win: *win, top: p[0], left: p[2] })
    }

    /// The input rows and columns the window of output `(oy, ox)` covers.
    pub(super) fn cells(&self, oy: usize, ox: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let y0 = (oy * self.win.strides[0]) as isize - self.top as isize;
        let x0 = (ox * self.win.strides[1]) as isize - self.left as isize;
        let clip = |a: isize, k: usize, n: usize| (a.max(0) as usize)..((a + k as isize).clamp(0, n as isize) as usize);
        (clip(y0, self.win.kernel[0], self.h), clip(x0, self.win.kernel[1], self.w))
    }

    /// Whether the windows tile the image: no two share a cell and together they cover
    /// every one (a 2x2 pool of stride 2 on an even image, or SAME-padded), so a gradient
    /// put back on the windows writes each cell exactly once.
    pub(super) fn tiles(&self) -> bool {
        let disjoint = (0..2).all(|d| self.win.strides[d] >= self.win.kernel[d]);
        let rows: usize = (0..self.oh).map(|oy| self.cells(oy, 0).0.len()).sum();
        let cols: usize = (0..self.ow).map(|ox| self.cells(0, ox).1.len()).sum();
        disjoint && rows == self.h && cols == self.w
    }

    /// Whether the windows are 2×2 with stride 2 from the corner of a plane of even height
    /// and width: every window whole, and each inside one 4×4 tile of Winograd F(4×4)'s
    /// output (`winograd::forward_pooled`).
    pub(super) fn halves(&self) -> bool {
        self.win.kernel == [2, 2]
            && self.win.strides == [2, 2]
            && self.top == 0
            && self.left == 0
            && self.h.is_multiple_of(2)
            && self.w.is_multiple_of(2)
            && (self.oh, self.ow) == (self.h / 2, self.w / 2)
    }

    /// Most cells a window covers (edge windows may cover fewer).
    pub(super) fn window_cells(&self) -> usize {
        self.win.kernel[0] * self.win.kernel[1]
    }

    pub(super) fn image(&self) -> usize {
        self.h * self.w * self.c
    }

    pub(super) fn pooled(&self) -> usize {
        self.oh * self.ow * self.c
    }
}

fn nhwc(t: &T, ctx: &KernelCtx<'_>) -> Result<[usize; 4]> {
    dims(t).try_into().map_err(|_| ctx.err("expected an NHWC tensor"))
}

/// Values and, per output, the position `y * w + x` of its maximum in the input plane.
pub(super) fn max_forward<E: Elem>(win: &Window, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [x] = ctx.floats(inputs)?;
    let [n, h, w, c] = nhwc(&x, ctx)?;
    let pl = Plane::new(win, [h, w], c, ctx)?;
    let xs = view::<E>(&x);
    let mut out = vec![E::zero(); n * pl.pooled()];
    let mut arg = vec![0i32; n * pl.pooled()];
    out.par_chunks_mut(pl.pooled())
        .zip(arg.par_chunks_mut(pl.pooled()))
        .zip(xs.par_chunks(pl.image()))
        .with_min_len(min_len())
        .for_each_init(|| vec![0i32; c], |pos, ((y, a), x)| pool_image(x, y, a, pos, &pl));
    let shape = [n, pl.oh, pl.ow, c];
    Ok(vec![Value::Float(tensor(out, &shape, ctx.device)), Value::Int(argmax_tensor(arg, &shape, ctx.device))])
}

/// One image's max pooling with argmax: the f32 SIMD kernel where it applies.
pub(super) fn pool_image<E: Elem>(x: &[E], y: &mut [E], a: &mut [i32], pos: &mut [i32], pl: &Plane) {
    if let (Some(x32), Some(y32)) = (super::buffer::as_f32(x), super::buffer::as_f32_mut(y))
        && super::microkernel::max_pool_f32(x32, y32, a, pl)
    {
        return;
    }
    max_image(x, y, a, pos, pl);
}

multiversion! {
    /// One image. Each window starts from its first cell (a window always has one), so the
    /// inner loop is a branch-free select over contiguous channels.
    pub(super) fn max_image<E: Elem>(x: &[E], y: &mut [E], a: &mut [i32], pos: &mut [i32], pl: &Plane) {
        let c = pl.c;
        for oy in 0..pl.oh {
            for ox in 0..pl.ow {
                let o = (oy * pl.ow + ox) * c;
                let best = &mut y[o..o + c];
                let (rows, cols) = pl.cells(oy, ox);
                let first = rows.start * pl.w + cols.start;
                best.copy_from_slice(&x[first * c..][..c]);
                pos.iter_mut().for_each(|p| *p = first as i32);
                for iy in rows {
                    for ix in cols.clone() {
                        let cell = (iy * pl.w + ix) as i32;
                        let src = &x[cell as usize * c..][..c];
                        for ((b, p), &v) in best.iter_mut().zip(pos.iter_mut()).zip(src) {
                            let take = v > *b;
                            *b = if take { v } else { *b };
                            *p = if take { cell } else { *p };
                        }
                    }
                }
                a[o..o + c].copy_from_slice(pos);
            }
        }
    }
}

pub(super) fn max_backward<E: Elem>(
    win: &Window,
    relu_mask: bool,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<T> {
    let mut it = inputs.into_iter();
    let (Some(Value::Float(x)), Some(Value::Int(idx)), Some(Value::Float(gy))) = (it.next(), it.next(), it.next())
    else {
        return Err(ctx.err("expected (input, argmax, gradient)"));
    };
    let [n, h, w, c] = nhwc(&x, ctx)?;
    let pl = Plane::new(win, [h, w], c, ctx)?;
    let (idx, gys, xs) = (argmax_cells(&idx), view::<E>(&gy), view::<E>(&x));
    if idx.len() != n * pl.pooled() || gys.len() != idx.len() {
        return Err(ctx.err("argmax and gradient do not match the pooling"));
    }
    // Each image's gradient is zeroed by the task that scatters into it, while it is in
    // cache: zeroing the batch's first was a pass over all of it (3 MB on the residual
    // model, 25 MB on the VGG) that was out of cache again by the time it was added to.
    let total = n * pl.image();
    let mut out: Vec<E> = Vec::with_capacity(total);
    out.spare_capacity_mut()[..total]
        .par_chunks_mut(pl.image())
        .zip(idx.par_chunks(pl.pooled()))
        .zip(gys.par_chunks(pl.pooled()))
        .zip(xs.par_chunks(pl.image()))
        .with_min_len(min_len())
        .for_each(|(((dx, a), dy), x)| {
            let dx = zeroed(dx);
            let wide = match (as_f32_mut(dx), as_f32(dy), as_f32(x)) {
                (Some(dxf), Some(dyf), Some(xf)) => {
                    let relu = if relu_mask { Relu::Input(xf) } else { Relu::None };
                    unpool_f32(dxf, a, dyf, &pl, relu)
                }
                _ => false,
            };
            if !wide {
                scatter_image(dx, a, dy, c, (h * w) as i64, relu_mask.then_some(x));
            }
        });
    // SAFETY: every image's part was zeroed (the chunks cover `0..total`).
    unsafe { out.set_len(total) };
    Ok(tensor(out, &[n, h, w, c], ctx.device))
}

/// Adds each pooled gradient to the input cell that was the maximum, row by row of
/// channels (no division per element). With `relu_input`, cells whose input is not
/// positive get nothing (the fused ReLU gradient).
pub(super) fn scatter_image<E: Elem>(
    dx: &mut [E],
    a: &[i32],
    dy: &[E],
    c: usize,
    plane: i64,
    relu_input: Option<&[E]>,
) {
    for (arow, grow) in a.chunks_exact(c).zip(dy.chunks_exact(c)) {
        for (ch, (&cell, &g)) in arow.iter().zip(grow).enumerate() {
            if (0..plane).contains(&i64::from(cell)) {
                let at = cell as usize * c + ch;
                if relu_input.is_none_or(|x| x[at] > E::zero()) {
                    dx[at] += g;
                }
            }
        }
    }
}

/// `unpool_image` for a plane `pl`: on AVX-512 sixteen channels at a time (see
/// `unpool512`), else the portable loop.
pub(super) fn unpool_plane<E: Elem>(dx: &mut [E], a: &[i32], dy: &[E], pl: &Plane, pooled: Option<&[E]>) {
    let relu = match pooled {
        None => Some(Relu::None),
        Some(p) => as_f32(p).map(Relu::Pooled),
    };
    if let (Some(dxf), Some(dyf), Some(relu)) = (as_f32_mut(dx), as_f32(dy), relu)
        && unpool_f32(dxf, a, dyf, pl, relu)
    {
        return;
    }
    unpool_image(dx, a, dy, pl.c, (pl.h * pl.w) as i64, pooled);
}

/// `unpool_plane` where the windows tile the image, into a `dx` that may be unwritten: each
/// cell gets its window's gradient or zero, stored once. False, having written nothing,
/// where the SIMD kernel does not apply (the caller then scatters into the zeroed `dx`).
fn unpool_tiled<E: Elem>(
    dx: &mut [std::mem::MaybeUninit<E>],
    a: &[i32],
    dy: &[E],
    pl: &Plane,
    pooled: Option<&[E]>,
) -> bool {
    let relu = match pooled {
        None => Some(Relu::None),
        Some(p) => as_f32(p).map(Relu::Pooled),
    };
    match (super::buffer::as_f32_uninit(dx), as_f32(dy), relu) {
        (Some(dx), Some(dy), Some(relu)) => super::unpool512::unpool_tiled_f32(dx, a, dy, pl, relu),
        _ => false,
    }
}

/// The pooled gradient `dy` of one image put back on the cells its argmax names, in a
/// zeroed `dx`. With `pooled`, the pool read a ReLU's output: a gradient whose pooled value
/// is not positive is dropped (`MaxPoolGradWithArgmax`'s mask).
pub(super) fn unpool_image<E: Elem>(dx: &mut [E], a: &[i32], dy: &[E], c: usize, plane: i64, pooled: Option<&[E]>) {
    for (q, (arow, grow)) in a.chunks_exact(c).zip(dy.chunks_exact(c)).enumerate() {
        for (ch, (&cell, &g)) in arow.iter().zip(grow).enumerate() {
            if (0..plane).contains(&i64::from(cell)) && pooled.is_none_or(|p| p[q * c + ch] > E::zero()) {
                dx[cell as usize * c + ch] += g;
            }
        }
    }
}

pub(super) fn max_backward_with_argmax<E: Elem>(
    m: &MaxPoolGradWithArgmax,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<T> {
    let mut it = inputs.into_iter();
    let (Some(Value::Float(pooled)), Some(Value::Int(idx)), Some(Value::Float(gy))) = (it.next(), it.next(), it.next())
    else {
        return Err(ctx.err("expected (pooled values, argmax, gradient)"));
    };
    let [n, _, _, c] = nhwc(&gy, ctx)?;
    let pl = Plane::new(&m.window, m.input_hw, c, ctx)?;
    let (idx, gys, ps) = (argmax_cells(&idx), view::<E>(&gy), view::<E>(&pooled));
    if idx.len() != n * pl.pooled() || gys.len() != idx.len() || ps.len() != idx.len() {
        return Err(ctx.err("argmax, pooled values and gradient do not match the pooling"));
    }
    // Zeroed per image in cache, as in `max_backward`.
    let total = n * pl.image();
    let mut out: Vec<E> = Vec::with_capacity(total);
    let lines = OutputLines::of(&out.spare_capacity_mut()[..total]);
    let tiles = pl.tiles();
    out.spare_capacity_mut()[..total]
        .par_chunks_mut(pl.image())
        .zip(idx.par_chunks(pl.pooled()))
        .zip(gys.par_chunks(pl.pooled()))
        .zip(ps.par_chunks(pl.pooled()))
        .enumerate()
        .with_min_len(min_len())
        .for_each(|(i, (((dx, a), dy), p))| {
            lines.prefetch_next::<E>(i, pl.image());
            let mask = m.relu_mask.then_some(p);
            // Zeroed first even where the windows tile the image and every cell is then
            // written once: `memset`'s string stores take the image's lines without reading
            // them, and the 2 × 2 blocks' stores (an image row apart) then hit cache. On a
            // Zen 5 core the residual model's pool gradient took 156–207 µs against
            // 175–281 without (six alternated rounds); ad26033 had dropped the zeroing on a
            // Zen 4, in a noisier measurement (0.46–0.60 → 0.41–0.56 ms).
            let dx = zeroed(dx);
            // SAFETY: `unpool_tiled` stores only initialized floats, so `dx` stays readable.
            if !(tiles && unpool_tiled(unsafe { super::buffer::as_uninit(dx) }, a, dy, &pl, mask)) {
                unpool_plane(dx, a, dy, &pl, mask);
            }
        });
    // SAFETY: every image's part was zeroed, then written by `unpool_tiled` or added to.
    unsafe { out.set_len(total) };
    Ok(tensor(out, &[n, pl.h, pl.w, c], ctx.device))
}

pub(super) fn avg_forward<E: Elem>(win: &Window, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x] = ctx.floats(inputs)?;
    let [n, h, w, c] = nhwc(&x, ctx)?;
    let pl = Plane::new(win, [h, w], c, ctx)?;
    let xs = view::<E>(&x);
    let mut out = vec![E::zero(); n * pl.pooled()];
    out.par_chunks_mut(pl.pooled()).zip(xs.par_chunks(pl.image())).with_min_len(min_len()).for_each(|(y, x)| {
        for oy in 0..pl.oh {
            for ox in 0..pl.ow {
                let acc = &mut y[(oy * pl.ow + ox) * c..][..c];
                let (rows, cols) = pl.cells(oy, ox);
                let count = E::from(rows.len() * cols.len()).unwrap_or(E::one());
                for iy in rows {
                    for ix in cols.clone() {
                        acc.iter_mut().zip(&x[(iy * w + ix) * c..][..c]).for_each(|(a, v)| *a += *v);
                    }
                }
                acc.iter_mut().for_each(|a| *a = *a / count);
            }
        }
    });
    Ok(tensor(out, &[n, pl.oh, pl.ow, c], ctx.device))
}

pub(super) fn avg_backward<E: Elem>(a: &AvgPool2dGrad, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [gy] = ctx.floats(inputs)?;
    let [n, _, _, c] = nhwc(&gy, ctx)?;
    let pl = Plane::new(&a.window, a.input_hw, c, ctx)?;
    let gys = view::<E>(&gy);
    let w = pl.w;
    let mut out = vec![E::zero(); n * pl.image()];
    out.par_chunks_mut(pl.image()).zip(gys.par_chunks(pl.pooled())).with_min_len(min_len()).for_each(|(dx, dy)| {
        for oy in 0..pl.oh {
            for ox in 0..pl.ow {
                let g = &dy[(oy * pl.ow + ox) * c..][..c];
                let (rows, cols) = pl.cells(oy, ox);
                let count = E::from(rows.len() * cols.len()).unwrap_or(E::one());
                for iy in rows {
                    for ix in cols.clone() {
                        dx[(iy * w + ix) * c..][..c].iter_mut().zip(g).for_each(|(d, v)| *d += *v / count);
                    }
                }
            }
        }
    });
    Ok(tensor(out, &[n, pl.h, pl.w, c], ctx.device))
}
