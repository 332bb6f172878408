//! Convolution as patch matrices times the filter: `y = im2col(x) · W`, with the HWIO
//! filter read as a `(kh*kw*c) x f` matrix in place. Backward: `dW = Σ im2col(x)ᵀ · dy`
//! and, for stride 1, `dx` as the convolution of `dy` with the turned filter (otherwise
//! `dx = col2im(dy · Wᵀ)`). Work is split by image across the rayon pool; filter
//! gradients are summed in a fixed order so results do not depend on timing.

use super::{
    buffer::{Elem, as_f32, as_f32_uninit, assume_init, min_len, sum_chunks, tensor, view, zeroed},
    gemm::{Mat, gemm},
    patches::PatchIndex,
    simd::{OutputLines, multiversion, prefetch_next_image},
};
use crate::{Result, Value, kernels::KernelCtx, value::T};
use engine_graph::ops::{
    Conv2d, Conv2dBackpropFilter, Conv2dBackpropInput, FusedActivation, FusedConv2d, FusedConv2dBackpropInput, Padding,
    Window,
};
use rayon::prelude::*;
use std::borrow::Cow;

/// The sizes of one convolution.
#[derive(Clone, Copy)]
pub(super) struct Geometry {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub sh: usize,
    pub sw: usize,
    pub top: usize,
    pub left: usize,
}

impl Geometry {
    pub(super) fn new(
        n: usize,
        hw: [usize; 2],
        c: usize,
        k: [usize; 2],
        strides: [usize; 2],
        padding: Padding,
        ctx: &KernelCtx<'_>,
    ) -> Result<Self> {
        let win = Window { kernel: k, strides, padding };
        let ([oh, ow], p) = win.output(hw).map_err(|e| ctx.err(e))?;
        Ok(Geometry {
            n,
            h: hw[0],
            w: hw[1],
            c,
            kh: k[0],
            kw: k[1],
            oh,
            ow,
            sh: strides[0],
            sw: strides[1],
            top: p[0],
            left: p[2],
        })
    }
    pub(super) fn patch(&self) -> usize {
        self.kh * self.kw * self.c
    }
    pub(super) fn pixels(&self) -> usize {
        self.oh * self.ow
    }
    pub(super) fn image(&self) -> usize {
        self.h * self.w * self.c
    }
}

multiversion! {
    /// Rows of output pixels, columns of (ky, kx, channel) taps; zeros where the window
    /// leaves the image. With stride 1 the taps of one kernel row are contiguous in the
    /// input, so a whole in-bounds run is copied at once.
    pub(super) fn im2col<E: Elem>(x: &[E], g: &Geometry, cols: &mut [E]) {
        let k = g.patch();
        let run = g.kw * g.c;
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let row = &mut cols[(oy * g.ow + ox) * k..][..k];
                let x0 = (ox * g.sw) as isize - g.left as isize;
                for ky in 0..g.kh {
                    let iy = (oy * g.sh + ky) as isize - g.top as isize;
                    let dst = &mut row[ky * run..][..run];
                    if iy < 0 || iy >= g.h as isize {
                        dst.iter_mut().for_each(|v| *v = E::zero());
                        continue;
                    }
                    let line = &x[iy as usize * g.w * g.c..][..g.w * g.c];
                    if x0 >= 0 && x0 as usize + g.kw <= g.w {
                        // Whole kernel row inside the image. A plain loop: runs are a few
                        // elements, where a `memcpy` call costs more than the copy.
                        for (d, s) in dst.iter_mut().zip(&line[x0 as usize * g.c..][..run]) {
                            *d = *s;
                        }
                    } else {
                        for kx in 0..g.kw {
                            let ix = x0 + kx as isize;
                            let d = &mut dst[kx * g.c..][..g.c];
                            if ix < 0 || ix >= g.w as isize {
                                d.iter_mut().for_each(|v| *v = E::zero());
                            } else {
                                d.copy_from_slice(&line[ix as usize * g.c..][..g.c]);
                            }
                        }
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
    convolve::<E>(c, x, w, None, None, ctx)
}

/// `activation(conv(x, w) + bias [+ skip])`: the bias, the skip and the activation are
/// applied to each image's output right after its product, while it is still in cache.
pub(super) fn fused<E: Elem>(c: &FusedConv2d, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    if c.residual {
        let [x, w, b, skip] = ctx.floats(inputs)?;
        let (bias, skip) = (view::<E>(&b), view::<E>(&skip));
        return convolve::<E>(&c.conv(), x, w, Some((&bias, c.activation)), Some(&skip), ctx);
    }
    let [x, w, b] = ctx.floats(inputs)?;
    let bias = view::<E>(&b);
    convolve::<E>(&c.conv(), x, w, Some((&bias, c.activation)), None, ctx)
}

fn convolve<E: Elem>(
    c: &Conv2d,
    x: T,
    w: T,
    post: Option<(&[E], FusedActivation)>,
    skip: Option<&[E]>,
    ctx: &KernelCtx<'_>,
) -> Result<T> {
    let [n, h, wd, ch] = shape4(&super::super::dims(&x), "input", ctx)?;
    let [kh, kw, _, f] = shape4(&super::super::dims(&w), "filter", ctx)?;
    let g = Geometry::new(n, [h, wd], ch, [kh, kw], c.strides, c.padding, ctx)?;
    let (xs, ws) = (view::<E>(&x), view::<E>(&w));
    let p = g.pixels();
    if post.is_some_and(|(b, _)| b.len() != f) {
        return Err(ctx.err("bias length differs from the output channels"));
    }
    if skip.is_some_and(|s| s.len() != n * p * f) {
        return Err(ctx.err("the addend's size differs from the output's"));
    }
    let mut out = Vec::with_capacity(n * p * f);
    let threads = inner_threads(&g);
    let method = Method::of(&g, f);
    let ws = method.filter(&ws, ch, f);
    let lines = OutputLines::of(&out.spare_capacity_mut()[..n * p * f]);
    let ok = out.spare_capacity_mut()[..n * p * f]
        .par_chunks_mut(p * f)
        .zip(xs.par_chunks(g.image()))
        .enumerate()
        .with_min_len(min_len())
        .map_init(Vec::new, |cols, (i, (y, x))| {
            prefetch_next_image(&xs, i, g.image());
            lines.prefetch_next::<E>(i, p * f);
            match skip {
                None => conv_image_uninit(x, &g, &method, &ws, f, post, y, cols, threads),
                Some(s) => {
                    prefetch_next_image(s, i, p * f);
                    conv_image_plus(x, &g, &method, &ws, f, post, &s[i * p * f..][..p * f], zeroed(y), cols, threads)
                }
            }
        })
        .all(|ok| ok);
    if !ok {
        return Err(ctx.err("matrix sizes do not fit the buffers"));
    }
    // SAFETY: `all` saw `true` from every image's task, each of which wrote every element
    // of its part (`conv_image_uninit`) or zeroed it first, and the parts cover the
    // `n * p * f` elements.
    unsafe { out.set_len(n * p * f) };
    Ok(tensor(out, &[n, g.oh, g.ow, f], ctx.device))
}

/// How one image of a convolution is computed: 3×3 stride-1 windows over many channels
/// with Winograd's F(2×2, 3×3) or F(4×4, 3×3) (see `winograd`), other small patches directly from the
/// image (see `direct_conv`), the rest as `im2col(x) · W` with `gemm`.
pub(super) enum Method {
    Direct(PatchIndex),
    Gemm,
    Winograd(super::winograd::Tile),
}

impl Method {
    /// The method for a convolution of `g` producing `f` channels.
    pub(super) fn of(g: &Geometry, f: usize) -> Method {
        if let Some(tile) = super::winograd::applies(g, f) {
            Method::Winograd(tile)
        } else if super::direct_conv::applies(g.patch(), f) {
            Method::Direct(PatchIndex::new(g))
        } else {
            Method::Gemm
        }
    }

    /// The HWIO filter `w` (`c` to `f` channels) in the form `conv_image` multiplies by:
    /// transformed once per call for Winograd, as it is otherwise.
    pub(super) fn filter<'a, E: Elem>(&self, w: &'a [E], c: usize, f: usize) -> Cow<'a, [E]> {
        match self {
            Method::Winograd(tile) => Cow::Owned(tile.transform_filter(w, c, f)),
            _ => Cow::Borrowed(w),
        }
    }

    /// Elements of a filter gradient as `filter_grad_image` accumulates it, for an HWIO
    /// filter of `shape`.
    pub(super) fn grad_len(&self, shape: [usize; 4]) -> usize {
        match self {
            Method::Winograd(tile) => tile.positions() * shape[2] * shape[3],
            _ => shape.iter().product(),
        }
    }

    /// The HWIO filter gradient from the sum of what `filter_grad_image` accumulated.
    fn finish_filter_grad<E: Elem>(&self, acc: Vec<E>, shape: [usize; 4]) -> Vec<E> {
        match self {
            Method::Winograd(tile) => tile.untransform_filter_grad(&acc, shape[2], shape[3]),
            _ => acc,
        }
    }
}

/// One image: `y = activation(conv(x, w) + bias)`, `w` as `Method::filter` gives it.
/// `scratch` holds the patch matrix, a padded copy of the image or Winograd's tiles (grown
/// on first use). False if a product did not fit.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_image<E: Elem>(
    x: &[E],
    g: &Geometry,
    method: &Method,
    ws: &[E],
    f: usize,
    post: Option<(&[E], FusedActivation)>,
    y: &mut [E],
    scratch: &mut Vec<E>,
    threads: usize,
) -> bool {
    let ok = match method {
        Method::Direct(index) => {
            let (bias, act) = match post {
                Some((b, a)) => (Some(b), a),
                None => (None, FusedActivation::Linear),
            };
            super::direct_conv::forward_image(x, g, index, ws, f, bias, act, y, scratch);
            return true;
        }
        Method::Winograd(tile) => {
            return super::winograd::forward_image(*tile, x, g, ws, f, post, None, y, scratch, threads);
        }
        Method::Gemm => {
            let (p, k) = (g.pixels(), g.patch());
            scratch.resize(p * k, E::zero());
            im2col(x, g, scratch);
            gemm(p, f, k, y, false, Mat::row_major(scratch, k), Mat::row_major(ws, f), threads)
        }
    };
    if let Some((bias, act)) = post {
        super::elementwise::bias_activation(y, bias, act);
    }
    ok
}

/// [`conv_image`] into an output that may be uninitialized: Winograd and the direct
/// microkernels over long patches write every element of it; the other methods get it
/// zeroed first (see `direct_conv::UNZEROED_PATCH`). True when every element was written.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_image_uninit<E: Elem>(
    x: &[E],
    g: &Geometry,
    method: &Method,
    ws: &[E],
    f: usize,
    post: Option<(&[E], FusedActivation)>,
    y: &mut [std::mem::MaybeUninit<E>],
    scratch: &mut Vec<E>,
    threads: usize,
) -> bool {
    match method {
        Method::Winograd(tile) => {
            y.len() == g.pixels() * f
                && super::winograd::forward_image_uninit(*tile, x, g, ws, f, post, None, None, y, scratch, threads)
        }
        Method::Direct(index) if y.len() == g.pixels() * f && g.patch() >= super::direct_conv::UNZEROED_PATCH => {
            let (bias, act) = match post {
                Some((b, a)) => (Some(b), a),
                None => (None, FusedActivation::Linear),
            };
            super::direct_conv::forward_image_uninit(x, g, index, ws, f, bias, act, y, scratch);
            true
        }
        _ => conv_image(x, g, method, ws, f, post, zeroed(y), scratch, threads),
    }
}

/// `conv_image` with one image's `skip` added before the activation: inside Winograd's
/// output transform where it runs, else in a pass over the image while it is in cache.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_image_plus<E: Elem>(
    x: &[E],
    g: &Geometry,
    method: &Method,
    ws: &[E],
    f: usize,
    post: Option<(&[E], FusedActivation)>,
    skip: &[E],
    y: &mut [E],
    scratch: &mut Vec<E>,
    threads: usize,
) -> bool {
    if let Method::Winograd(tile) = method {
        return super::winograd::forward_image(*tile, x, g, ws, f, post, Some(skip), y, scratch, threads);
    }
    let (linear, act) = match post {
        Some((b, a)) => (Some((b, FusedActivation::Linear)), a),
        None => (None, FusedActivation::Linear),
    };
    if !conv_image(x, g, method, ws, f, linear, y, scratch, threads) || skip.len() != y.len() {
        return false;
    }
    super::elementwise::add_activation(y, skip, act);
    true
}

/// One image's filter gradient added to `acc` (`k x f`, or 16 `c x f` for Winograd: see
/// `Method::grad_len`), and its bias gradient to `bias` unless that is empty (Winograd
/// sums it while it reads `dy` anyway).
#[allow(clippy::too_many_arguments)]
pub(super) fn filter_grad_image<E: Elem>(
    x: &[E],
    g: &Geometry,
    method: &Method,
    dy: &[E],
    f: usize,
    acc: &mut [E],
    bias: &mut [E],
    scratch: &mut Vec<E>,
) -> bool {
    let ok = match method {
        Method::Direct(index) => {
            super::direct_conv::filter_grad_image(x, g, index, dy, f, acc, scratch);
            true
        }
        Method::Winograd(tile) => return super::winograd::filter_grad_image(*tile, x, g, dy, f, acc, bias, scratch),
        Method::Gemm => {
            let (p, k) = (g.pixels(), g.patch());
            scratch.resize(p * k, E::zero());
            im2col(x, g, scratch);
            gemm(k, f, p, acc, true, Mat::transposed(scratch, k), Mat::row_major(dy, f), 1)
        }
    };
    if !bias.is_empty() {
        super::reduce::add_rows(bias, dy);
    }
    ok
}

/// The filter gradient, and with `with_bias` the bias gradient from the same pass.
pub(super) fn backprop_filter<E: Elem>(
    c: &Conv2dBackpropFilter,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<Vec<Value>> {
    let [x, gy] = ctx.floats(inputs)?;
    let [n, h, wd, ch] = shape4(&super::super::dims(&x), "input", ctx)?;
    let f = super::super::dims(&gy).last().copied().unwrap_or(0);
    let g = Geometry::new(n, [h, wd], ch, c.filter_hw, c.strides, c.padding, ctx)?;
    let (xs, gys) = (view::<E>(&x), view::<E>(&gy));
    let p = g.pixels();
    if gys.len() != n * p * f {
        return Err(ctx.err("output gradient does not match the convolution"));
    }
    let per_task = sum_chunks(n);
    let method = Method::of(&g, f);
    let shape = [g.kh, g.kw, ch, f];
    let partials: Vec<Option<(Vec<E>, Vec<E>)>> = (0..n.div_ceil(per_task))
        .into_par_iter()
        .with_min_len(min_len())
        .map(|t| {
            let mut acc = vec![E::zero(); method.grad_len(shape)];
            let mut bias = vec![E::zero(); if c.with_bias { f } else { 0 }];
            let mut cols = Vec::new();
            for i in t * per_task..((t + 1) * per_task).min(n) {
                prefetch_next_image(&xs, i, g.image());
                prefetch_next_image(&gys, i, p * f);
                let dy = &gys[i * p * f..][..p * f];
                if !filter_grad_image(
                    &xs[i * g.image()..][..g.image()],
                    &g,
                    &method,
                    dy,
                    f,
                    &mut acc,
                    &mut bias,
                    &mut cols,
                ) {
                    return None;
                }
            }
            Some((acc, bias))
        })
        .collect();
    sum_filter_grads(partials, c.with_bias, &method, shape, ctx)
}

/// The filter gradient (`[kh, kw, c, f]`) and, `with_bias`, the bias gradient (`[f]`): the
/// sums of the threads' partial gradients (`None` where a part's buffers did not fit), as
/// `method` accumulated them.
pub(super) fn sum_filter_grads<E: Elem>(
    partials: Vec<Option<(Vec<E>, Vec<E>)>>,
    with_bias: bool,
    method: &Method,
    shape: [usize; 4],
    ctx: &KernelCtx<'_>,
) -> Result<Vec<Value>> {
    let f = shape[3];
    let mut total = vec![E::zero(); method.grad_len(shape)];
    let mut bias = vec![E::zero(); if with_bias { f } else { 0 }];
    for part in partials {
        let (w, b) = part.ok_or_else(|| ctx.err("matrix sizes do not fit the buffers"))?;
        total.iter_mut().zip(w).for_each(|(t, v)| *t += v);
        bias.iter_mut().zip(b).for_each(|(t, v)| *t += v);
    }
    let total = method.finish_filter_grad(total, shape);
    let mut out = vec![Value::Float(tensor(total, &shape, ctx.device))];
    if with_bias {
        out.push(Value::Float(tensor(bias, &[f], ctx.device)));
    }
    Ok(out)
}

pub(super) fn backprop_input<E: Elem>(c: &Conv2dBackpropInput, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [w, gy] = ctx.floats(inputs)?;
    input_grad::<E>(c, w, gy, None, ctx)
}

/// `ReluGrad(y, conv2d_backprop_input(w, dy) [+ addend])`: the mask (and the sum) applied
/// to each image's gradient right after it is computed, while it is in cache.
pub(super) fn fused_backprop_input<E: Elem>(
    c: &FusedConv2dBackpropInput,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<T> {
    let mut inputs = inputs;
    let addend = if c.addend { Some(inputs.pop().ok_or_else(|| ctx.err("missing the addend"))?) } else { None };
    let [w, gy, y] = ctx.floats(inputs)?;
    let addend = addend.map(|a| ctx.floats::<1>(vec![a])).transpose()?;
    let y = view::<E>(&y);
    let addend = addend.as_ref().map(|[a]| view::<E>(a));
    input_grad::<E>(&c.input_grad, w, gy, Some(ReluGradEpilogue { y: &y, addend: addend.as_deref() }), ctx)
}

/// What a fused input gradient does to each image's gradient once it is written:
/// `dx = ReluGrad(y, dx [+ addend])`, with the whole batch's `y` and addend.
#[derive(Clone, Copy)]
struct ReluGradEpilogue<'a, E> {
    y: &'a [E],
    addend: Option<&'a [E]>,
}

impl<E: Elem> ReluGradEpilogue<'_, E> {
    fn fits(&self, len: usize) -> bool {
        self.y.len() == len && self.addend.is_none_or(|a| a.len() == len)
    }

    /// Brings image `i + 1`'s operands into L2 as image `i` starts (as the convolution's own
    /// inputs are): read only at the end of each image, they would otherwise stall it.
    fn prefetch_next(&self, i: usize, len: usize) {
        prefetch_next_image(self.y, i, len);
        if let Some(a) = self.addend {
            prefetch_next_image(a, i, len);
        }
    }

    /// Image `i`'s addend (if any) and ReLU output, for images of `len` elements.
    fn image(&self, i: usize, len: usize) -> (Option<&[E]>, &[E]) {
        (self.addend.map(|a| &a[i * len..][..len]), &self.y[i * len..][..len])
    }

    /// Applies the epilogue to image `i` (of `len` elements), written in `dx`.
    fn apply(&self, i: usize, len: usize, dx: &mut [E]) {
        match self.image(i, len) {
            (Some(a), y) => super::elementwise::relu_grad_sum(dx, y, a),
            (None, y) => super::elementwise::relu_grad_chunk(dx, y),
        }
    }
}

fn input_grad<E: Elem>(
    c: &Conv2dBackpropInput,
    w: T,
    gy: T,
    post: Option<ReluGradEpilogue<'_, E>>,
    ctx: &KernelCtx<'_>,
) -> Result<T> {
    let [kh, kw, ch, f] = shape4(&super::super::dims(&w), "filter", ctx)?;
    let n = super::super::dims(&gy).first().copied().unwrap_or(0);
    let g = Geometry::new(n, c.input_hw, ch, [kh, kw], c.strides, c.padding, ctx)?;
    let (ws, gys) = (view::<E>(&w), view::<E>(&gy));
    let (p, k) = (g.pixels(), g.patch());
    if gys.len() != n * p * f || ws.len() != k * f {
        return Err(ctx.err("output gradient does not match the convolution"));
    }
    if post.is_some_and(|e| !e.fits(n * g.image())) {
        return Err(ctx.err("the ReLU's output or the addend differs from the input gradient's shape"));
    }
    let mut out = Vec::with_capacity(n * g.image());
    let parts = &mut out.spare_capacity_mut()[..n * g.image()];
    let ok = if g.sh == 1 && g.sw == 1 {
        input_grad_as_convolution(&g, &ws, f, &gys, post, parts)
    } else if let (Some(phases), Some(dys)) = (super::phase_input_grad::phases_for(&g, &ws, f), as_f32(&gys)) {
        input_grad_by_phases(&phases, &g, dys, f, post, parts)
    } else {
        let threads = inner_threads(&g);
        parts
            .par_chunks_mut(g.image())
            .zip(gys.par_chunks(p * f))
            .enumerate()
            .with_min_len(min_len())
            .map_init(
                || vec![E::zero(); p * k],
                |cols, (i, (dx, dy))| {
                    if let Some(e) = post {
                        e.prefetch_next(i, g.image());
                    }
                    let dx = zeroed(dx);
                    let ok = gemm(p, k, f, cols, false, Mat::row_major(dy, f), Mat::transposed(&ws, f), threads);
                    col2im(cols, &g, dx);
                    if let Some(e) = post {
                        e.apply(i, g.image(), dx);
                    }
                    ok
                },
            )
            .all(|ok| ok)
    };
    if !ok {
        return Err(ctx.err("matrix sizes do not fit the buffers"));
    }
    // SAFETY: `all` saw `true` from every image's task, each of which wrote every element
    // of its part (`conv_image_uninit`, `Phases::image`) or zeroed it first, and the parts
    // cover the `n * g.image()` elements.
    unsafe { out.set_len(n * g.image()) };
    Ok(tensor(out, &[n, g.h, g.w, ch], ctx.device))
}

/// A strided convolution's input gradient, image by image, one phase of the stride at a
/// time (see `phase_input_grad`). True when every image was written in full.
fn input_grad_by_phases<E: Elem>(
    phases: &super::phase_input_grad::Phases,
    g: &Geometry,
    dys: &[f32],
    f: usize,
    post: Option<ReluGradEpilogue<'_, E>>,
    parts: &mut [std::mem::MaybeUninit<E>],
) -> bool {
    let p = g.pixels();
    parts
        .par_chunks_mut(g.image())
        .zip(dys.par_chunks(p * f))
        .enumerate()
        .with_min_len(min_len())
        .map_init(Vec::new, |scratch, (i, (dx, dy))| {
            prefetch_next_image(dys, i, p * f);
            if let Some(e) = post {
                e.prefetch_next(i, g.image());
            }
            let Some(dx32) = as_f32_uninit(dx) else { return false };
            if !phases.image(dy, g, dx32, scratch) {
                return false;
            }
            if let Some(e) = post {
                // SAFETY: `Phases::image` wrote every element of the image.
                e.apply(i, g.image(), unsafe { assume_init(dx) });
            }
            true
        })
        .all(|ok| ok)
}

/// The input gradient of a stride-1 convolution is itself a convolution: of the output
/// gradient, padded by `k - 1 - pad` on each side, with the filter turned 180° and its
/// channel axes swapped. So it runs on the forward kernels (direct for small patches,
/// `im2col` + `gemm` otherwise), with no `col2im` scatter-add.
fn input_grad_as_convolution<E: Elem>(
    g: &Geometry,
    w: &[E],
    f: usize,
    dy: &[E],
    post: Option<ReluGradEpilogue<'_, E>>,
    dx: &mut [std::mem::MaybeUninit<E>],
) -> bool {
    let (kh, kw, c) = (g.kh, g.kw, g.c);
    // `rotated[ky][kx][j][i] = w[kh-1-ky][kw-1-kx][i][j]`: HWIO with I = f, O = c.
    let mut rotated = vec![E::zero(); w.len()];
    for ky in 0..kh {
        for kx in 0..kw {
            let src = &w[((kh - 1 - ky) * kw + (kw - 1 - kx)) * c * f..][..c * f];
            let dst = &mut rotated[(ky * kw + kx) * f * c..][..f * c];
            for i in 0..c {
                for j in 0..f {
                    dst[j * c + i] = src[i * f + j];
                }
            }
        }
    }
    let gradient = Geometry {
        n: g.n,
        h: g.oh,
        w: g.ow,
        c: f,
        kh,
        kw,
        oh: g.h,
        ow: g.w,
        sh: 1,
        sw: 1,
        top: kh - 1 - g.top,
        left: kw - 1 - g.left,
    };
    let threads = inner_threads(&gradient);
    let method = Method::of(&gradient, c);
    let rotated = method.filter(&rotated, f, c);
    let lines = OutputLines::of(dx);
    dx.par_chunks_mut(g.image())
        .zip(dy.par_chunks(gradient.image()))
        .enumerate()
        .with_min_len(min_len())
        .map_init(Vec::new, |scratch, (i, (dx, dy_image))| {
            prefetch_next_image(dy, i, gradient.image());
            lines.prefetch_next::<E>(i, g.image());
            if let Some(e) = post {
                e.prefetch_next(i, g.image());
            }
            match (post, &method) {
                // Winograd's output transform adds the addend and applies the mask itself.
                (Some(e), Method::Winograd(tile)) => {
                    let (skip, gate) = e.image(i, g.image());
                    super::winograd::forward_image_uninit(
                        *tile,
                        dy_image,
                        &gradient,
                        &rotated,
                        c,
                        None,
                        skip,
                        Some(gate),
                        dx,
                        scratch,
                        threads,
                    )
                }
                _ => {
                    let ok = conv_image_uninit(dy_image, &gradient, &method, &rotated, c, None, dx, scratch, threads);
                    if let Some(e) = post.filter(|_| ok) {
                        // SAFETY: `conv_image_uninit` returned true: it wrote every element.
                        e.apply(i, g.image(), unsafe { super::buffer::assume_init(dx) });
                    }
                    ok
                }
            }
        })
        .all(|ok| ok)
}

#[cfg(test)]
mod probe {
    use super::*;
    use std::time::Instant;

    #[test]
    #[ignore = "timing probe"]
    fn im2col_probe() {
        let g = Geometry { n: 64, h: 28, w: 28, c: 1, kh: 3, kw: 3, oh: 26, ow: 26, sh: 1, sw: 1, top: 0, left: 0 };
        let x: Vec<f32> = (0..64 * 784).map(|i| i as f32).collect();
        let mut cols = vec![0.0f32; 676 * 9];
        let w: Vec<f32> = (0..9 * 32).map(|i| i as f32).collect();
        let mut out = vec![0.0f32; 676 * 32];
        for _ in 0..3 {
            let t = Instant::now();
            for i in 0..64 {
                im2col(&x[i * 784..][..784], &g, &mut cols);
            }
            let t1 = t.elapsed();
            let t = Instant::now();
            for _ in 0..64 {
                gemm(676, 32, 9, &mut out, false, Mat::row_major(&cols, 9), Mat::row_major(&w, 32), 1);
            }
            let t2 = t.elapsed();
            let t = Instant::now();
            let mut gw = vec![0.0f32; 9 * 32];
            for _ in 0..64 {
                gemm(9, 32, 676, &mut gw, true, Mat::transposed(&cols, 9), Mat::row_major(&out, 32), 1);
            }
            println!("im2col {t1:?} gemm fwd {t2:?} gemm filter {:?}", t.elapsed());
        }
    }
}
