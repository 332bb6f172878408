//! Winograd's minimal filtering F(2×2, 3×3) for 3×3 stride-1 convolutions (Lavin and
//! Gray, 2015). A 2×2 block of output pixels is computed from a 4×4 block of the input
//! with 16 multiplications per channel pair instead of 36, so the products that dominate
//! a convolution over many channels do 2.25× fewer multiply-adds than `im2col` + `gemm`.
//! Each image's tiles are transformed (`Bᵀ d B`), multiplied by the transformed filter
//! (`G w Gᵀ`) as 16 matrix products over the channels, and transformed back (`Aᵀ m A`).
//!
//! The filter gradient runs the same transforms the other way:
//! `∂w = Gᵀ (Σ_tiles (Bᵀ d B) ⊙ (A ∂y Aᵀ)) G`, as 16 products accumulated over the
//! batch and turned back into a 3×3 filter once. The input gradient of a stride-1
//! convolution is itself a convolution (`conv::input_grad_as_convolution`) and so takes
//! this path too. F(2,3)'s transform constants are 0, ±1 and ½, so its rounding stays
//! within a few ulps of the direct sum (tested against `im2col` + `gemm` below).
//!
//! F(4×4, 3×3) (`winograd4`: 36 products for a 4×4 block) runs through the same driver,
//! the tiles, products and filter-gradient sums here, with its own transforms; `applies`
//! picks one of the two per convolution (`Tile`).

use super::{
    buffer::{Elem, as_f32, as_f32_mut, optional_f32},
    conv::Geometry,
    gemm::{Mat, gemm},
    microkernel::{Out, TapIndex, conv_f32, filter_grad_f32},
    simd::multiversion,
    winograd4, winograd4_512, winograd512,
};
use engine_graph::ops::FusedActivation;

/// Positions of a transformed 4×4 tile: the number of products per image.
pub(super) const TILE: usize = 16;

/// The fewest input and output channels for which the portable transforms pay for
/// themselves. Measured with `winograd_probe` below on one Zen 4 core (f32, µs per 28×28
/// image, forward): 16 → 16 channels direct 36, Winograd 38 (the products' inner dimension
/// of 16 makes the transforms cost what they save); 32 → 32 `im2col` + `gemm` 150,
/// Winograd 95; 64 → 64 546 against 304. Filter gradients scale the same way.
pub(super) const MIN_CHANNELS: usize = 32;

/// Which of Winograd's algorithms computes a convolution: F(2×2, 3×3) (this module's
/// transforms) or F(4×4, 3×3) (`winograd4`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Tile {
    F2,
    F4,
}

impl Tile {
    /// Positions of a transformed tile: the number of products per image.
    pub(super) fn positions(self) -> usize {
        match self {
            Tile::F2 => TILE,
            Tile::F4 => winograd4::POSITIONS,
        }
    }

    /// Output pixels along a tile's side.
    fn out(self) -> usize {
        match self {
            Tile::F2 => 2,
            Tile::F4 => winograd4::OUT,
        }
    }

    /// The filter for `forward_image`: one `c x f` matrix per position.
    pub(super) fn transform_filter<E: Elem>(self, w: &[E], c: usize, f: usize) -> Vec<E> {
        match self {
            Tile::F2 => transform_filter(w, c, f),
            Tile::F4 => winograd4::transform_filter(w, c, f),
        }
    }

    /// The HWIO filter gradient from what `filter_grad_image` accumulated.
    pub(super) fn untransform_filter_grad<E: Elem>(self, acc: &[E], c: usize, f: usize) -> Vec<E> {
        match self {
            Tile::F2 => untransform_filter_grad(acc, c, f),
            Tile::F4 => winograd4::untransform_filter_grad(acc, c, f),
        }
    }
}

/// Which Winograd algorithm computes a convolution producing `f` channels, if any.
///
/// F(2×2, 3×3) from `MIN_CHANNELS`, or from 16 where the channels are in sixteens and the
/// AVX-512 transforms (`winograd512`) run. Those made 16 → 16 channels worth it: on one
/// Zen 5 core, 15.3 / 14.3 µs per 28×28 image (forward / filter gradient) against the
/// direct kernels' 20.0 / 22.4.
///
/// F(4×4, 3×3) where its AVX-512 transforms run, with fewer than 64 channels (the
/// products go to the microkernels) or at least `MIN_F4_TILES` tiles per image (`gemm`'s).
/// Per image on one Zen 5 core, µs forward / filter gradient, F(2×2) against F(4×4):
/// 28×28 16 → 16 14.7 / 13.8 against 10.1 / 9.1; 28×28 32 → 32 35.7 / 40.8 against
/// 24.3 / 24.0; 28×28 64 → 64 131 / 148 against 89 / 87. At 14×14, 64 → 128 and
/// 128 → 128, F(4×4)'s 16 tiles make `gemm` products of 16 rows, and it loses (67.5 / 70.1
/// against 72.6 / 99.1). At 7×7, 64 → 64 (4 tiles), the probe puts F(4×4) ahead (11.6 /
/// 15.0 against 13.4 / 18.3 µs), but in the ResNet's step it ran slower (`block2_conv2`
/// forward 1.75 → 2.15 ms, filter gradient 2.23 → 2.35), so F(2×2) stays there.
pub(super) fn applies(g: &Geometry, f: usize) -> Option<Tile> {
    if g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.pixels() == 0 {
        return None;
    }
    let wide = winograd512::applies(g.c) && winograd512::applies(f);
    let tiles4 = g.oh.div_ceil(winograd4::OUT) * g.ow.div_ceil(winograd4::OUT);
    // The share of F(4×4)'s tiles that is output, not padding up to a multiple of 4.
    let used = (g.oh * g.ow) as f64 / (tiles4 * winograd4::OUT * winograd4::OUT) as f64;
    if wide && used >= MIN_F4_USED && (small_product(g.c, f) || tiles4 >= MIN_F4_TILES) {
        Some(Tile::F4)
    } else if wide || (g.c >= MIN_CHANNELS && f >= MIN_CHANNELS) {
        Some(Tile::F2)
    } else {
        None
    }
}

/// The fewest F(4×4, 3×3) tiles per image for which products through `gemm` pay: a 28×28
/// image has 49, a 14×14 one 16.
const MIN_F4_TILES: usize = 32;

/// The least share of F(4×4, 3×3)'s tiles that must be output. A 14×14 output needs 16×16
/// (77 % used); there, 32 → 32 channels, F(4×4) is no faster than F(2×2) per image
/// (8.2 / 9.9 against 9.1 / 9.8 µs) and the ResNet spec's step was 1.5 % slower with it.
const MIN_F4_USED: f64 = 0.85;

/// The tiling of one image: `th x tw` tiles of `m x m` output pixels, read from a
/// zero-padded copy of the image `ph x pw` pixels large where the portable F(2×2, 3×3)
/// transforms run.
#[derive(Clone, Copy)]
struct Tiles {
    th: usize,
    tw: usize,
    ph: usize,
    pw: usize,
}

impl Tiles {
    fn of(g: &Geometry, kind: Tile) -> Tiles {
        let m = kind.out();
        let (th, tw) = (g.oh.div_ceil(m), g.ow.div_ceil(m));
        let (ph, pw) = match kind {
            Tile::F2 => (2 * th + 2, 2 * tw + 2),
            Tile::F4 => (0, 0),
        };
        Tiles { th, tw, ph, pw }
    }
    fn count(&self) -> usize {
        self.th * self.tw
    }
    fn layout(&self, g: &Geometry) -> winograd512::Layout {
        let (th, tw) = (self.th, self.tw);
        winograd512::Layout { th, tw, h: g.h, w: g.w, top: g.top, left: g.left, oh: g.oh, ow: g.ow }
    }
}

fn half<E: Elem>() -> E {
    E::one() / (E::one() + E::one())
}

/// The filter for `forward_image`: `u[ξ]` (16 row-major `c x f` matrices) = `G w Gᵀ` for
/// every channel pair, from the HWIO 3×3 filter `w`.
pub(super) fn transform_filter<E: Elem>(w: &[E], c: usize, f: usize) -> Vec<E> {
    let (cf, h) = (c * f, half::<E>());
    let mut u = vec![E::zero(); TILE * cf];
    if w.len() < 9 * cf {
        return u;
    }
    for e in 0..cf {
        let at = |a: usize, b: usize| w[(a * 3 + b) * cf + e];
        // `G w` column by column (4×3), then `u = (G w) Gᵀ` row by row (4×4).
        let cols: [[E; 4]; 3] = std::array::from_fn(|b| {
            let (g0, g1, g2) = (at(0, b), at(1, b), at(2, b));
            [g0, (g0 + g1 + g2) * h, (g0 - g1 + g2) * h, g2]
        });
        for a in 0..4 {
            let (t0, t1, t2) = (cols[0][a], cols[1][a], cols[2][a]);
            u[(a * 4) * cf + e] = t0;
            u[(a * 4 + 1) * cf + e] = (t0 + t1 + t2) * h;
            u[(a * 4 + 2) * cf + e] = (t0 - t1 + t2) * h;
            u[(a * 4 + 3) * cf + e] = t2;
        }
    }
    u
}

/// The HWIO 3×3 filter gradient from its transformed form `acc[ξ]` (16 `c x f`
/// matrices): `Gᵀ acc G`, the adjoint of `transform_filter`.
pub(super) fn untransform_filter_grad<E: Elem>(acc: &[E], c: usize, f: usize) -> Vec<E> {
    let (cf, h) = (c * f, half::<E>());
    let mut w = vec![E::zero(); 9 * cf];
    if acc.len() < TILE * cf {
        return w;
    }
    // `Gᵀ v` for a 4-vector `v`: G's columns are (1, ½, ½, 0), (0, ½, -½, 0), (0, ½, ½, 1).
    let gt = |v: [E; 4]| [v[0] + (v[1] + v[2]) * h, (v[1] - v[2]) * h, (v[1] + v[2]) * h + v[3]];
    for e in 0..cf {
        let rows: [[E; 3]; 4] = std::array::from_fn(|p| gt(std::array::from_fn(|q| acc[(p * 4 + q) * cf + e])));
        for b in 0..3 {
            let col = gt(std::array::from_fn(|p| rows[p][b]));
            for (a, v) in col.into_iter().enumerate() {
                w[(a * 3 + b) * cf + e] = v;
            }
        }
    }
    w
}

/// One image: `y (pixels x f) = act(conv(x, w) + bias + skip)` (`post`, `skip` the
/// image's addend if any), with `u` from `Tile::transform_filter`. False if a buffer does
/// not fit (the caller's error).
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_image<E: Elem>(
    kind: Tile,
    x: &[E],
    g: &Geometry,
    u: &[E],
    f: usize,
    post: Option<(&[E], FusedActivation)>,
    skip: Option<&[E]>,
    y: &mut [E],
    scratch: &mut Vec<E>,
    threads: usize,
) -> bool {
    // SAFETY: `forward_image_uninit` writes only initialized values.
    let y = unsafe { super::buffer::as_uninit(y) };
    forward_image_uninit(kind, x, g, u, f, post, skip, None, y, scratch, threads)
}

/// [`forward_image`] with `skip`, the bias and the activation, max-pooled 2×2 with stride 2
/// inside F(4×4)'s output transform (`winograd4_512::transform_output_pool`): each 4×4
/// tile holds four whole windows, so the convolution's plane (50 KB an image on the
/// residual model) is never stored and read back by a pooling pass. `pooled` and `argmax`
/// are as `pool::pool_image` writes them, bit for bit. False, having written nothing,
/// where it does not apply (F(2×2), other pools, channels not in sixteens, no AVX-512, f64):
/// the caller then convolves and pools.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_pooled<E: Elem>(
    kind: Tile,
    x: &[E],
    g: &Geometry,
    u: &[E],
    f: usize,
    post: (&[E], FusedActivation),
    skip: Option<&[E]>,
    pooled: &mut [std::mem::MaybeUninit<E>],
    argmax: &mut [std::mem::MaybeUninit<i32>],
    scratch: &mut Vec<E>,
    threads: usize,
) -> bool {
    let layout = Tiles::of(g, kind).layout(g);
    let pixels = g.pixels() * f;
    let operands = (as_f32(post.0), optional_f32(skip), super::buffer::as_f32_uninit(pooled));
    let (Some(bias), Some(skip), Some(pooled)) = operands else { return false };
    if kind != Tile::F4
        || !winograd4_512::pool_fits(&layout, f)
        || u.len() != kind.positions() * g.c * f
        || x.len() < g.image()
        || skip.is_some_and(|s| s.len() < pixels)
    {
        return false;
    }
    let Some((t, v, m)) = transformed_image(kind, x, g, f, scratch) else { return false };
    if !products(v, u, m, t.count(), g.c, f, threads) {
        return false;
    }
    let Some(m) = as_f32(m) else { return false };
    let relu = post.1 == FusedActivation::Relu;
    winograd4_512::transform_output_pool(m, &layout, f, Some(bias), skip, relu, pooled, argmax)
}

/// [`forward_image`] into an output that may be uninitialized: both tiles zero the image's
/// output first (F(4×4)'s transform would write every pixel, but see below). With `gate` (a
/// ReLU's output of the image's layout), the result is then masked as `ReluGrad(gate, y)`:
/// inside F(4×4)'s output transform, in a pass over the image in cache after F(2×2)'s.
/// True when every element of the image's output was written.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_image_uninit<E: Elem>(
    kind: Tile,
    x: &[E],
    g: &Geometry,
    u: &[E],
    f: usize,
    post: Option<(&[E], FusedActivation)>,
    skip: Option<&[E]>,
    gate: Option<&[E]>,
    y: &mut [std::mem::MaybeUninit<E>],
    scratch: &mut Vec<E>,
    threads: usize,
) -> bool {
    let c = g.c;
    let pixels = g.pixels() * f;
    if u.len() != kind.positions() * c * f || y.len() < pixels || x.len() < g.image() {
        return false;
    }
    if skip.is_some_and(|s| s.len() < pixels) || gate.is_some_and(|s| s.len() < pixels) {
        return false;
    }
    let Some((t, v, m)) = transformed_image(kind, x, g, f, scratch) else { return false };
    if !products(v, u, m, t.count(), c, f, threads) {
        return false;
    }
    let (bias, act) = match post {
        Some((b, a)) => (Some(b), a),
        None => (None, FusedActivation::Linear),
    };
    let relu = act == FusedActivation::Relu;
    if kind == Tile::F4 {
        // Zeroed first although every pixel is then written: `memset`'s string stores take
        // the image's lines without reading them, and the transform's stores (4 × 4 pixel
        // blocks, a row of the image apart) then hit cache instead of each fetching a line
        // of the fresh output. On a Zen 5 core the residual model's F(4×4) convolutions
        // and input gradients took 5–18 % less time each (three alternated rounds).
        super::buffer::zeroed(&mut y[..pixels]);
        return winograd4::transform_output(m, &t.layout(g), f, bias, skip, relu, gate, &mut y[..pixels]);
    }
    let y = super::buffer::zeroed(&mut y[..pixels]);
    // F(2×2, 3×3) adds the skip in a pass of its own, after the bias, before the activation.
    if let Some(s) = skip {
        forward_output_f2(m, g, &t, f, bias, FusedActivation::Linear, y);
        super::elementwise::add_activation(&mut y[..pixels], &s[..pixels], act);
    } else {
        forward_output_f2(m, g, &t, f, bias, act, y);
    }
    if let Some(gate) = gate {
        super::elementwise::relu_grad_chunk(y, &gate[..pixels]);
    }
    true
}

/// F(2×2, 3×3)'s output transform with the bias and activation: on AVX-512 where it runs,
/// else the portable loops and `bias_activation`.
fn forward_output_f2<E: Elem>(
    m: &[E],
    g: &Geometry,
    t: &Tiles,
    f: usize,
    bias: Option<&[E]>,
    act: FusedActivation,
    y: &mut [E],
) {
    let relu = act == FusedActivation::Relu;
    if let (Some(mf), Some(yf), Some(bf)) = (as_f32(m), as_f32_mut(y), optional_f32(bias))
        && winograd512::transform_output(mf, &t.layout(g), f, bf, relu, yf)
    {
        return;
    }
    transform_output(m, g.oh, g.ow, f, t.th, t.tw, y);
    if let Some(b) = bias {
        super::elementwise::bias_activation(y, b, act);
    }
}

/// `m[ξ] (tiles x f) = v[ξ] (tiles x c) · u[ξ] (c x f)` for the 16 positions, all
/// row-major: a position's tiles are contiguous, so the products stream through them.
fn products<E: Elem>(v: &[E], u: &[E], m: &mut [E], count: usize, c: usize, f: usize, threads: usize) -> bool {
    if let (Some(vf), Some(uf), Some(mf)) = (as_f32(v), as_f32(u), as_f32_mut(m))
        && small_product(c, f)
    {
        // Small products: the microkernels, without `gemm`'s packing.
        let index = tile_index(count, c);
        return mf.chunks_exact_mut(count * f).zip(uf.chunks_exact(c * f)).enumerate().all(|(xi, (mx, ux))| {
            let taps = index.over(&vf[xi * count * c..]);
            conv_f32(taps, ux, None, false, Out::dense(mx), (count, c, f))
        });
    }
    m.chunks_exact_mut(count * f).zip(u.chunks_exact(c * f)).enumerate().all(|(xi, (mx, ux))| {
        let lhs = Mat::row_major(&v[xi * count * c..], c);
        gemm(count, f, c, mx, false, lhs, Mat::row_major(ux, f), threads)
    })
}

/// One image's filter gradient added to `acc` (a `c x f` matrix per position, the
/// transformed form: `Tile::untransform_filter_grad` turns the batch's sum into a 3×3
/// filter), and its bias gradient to `bias` unless that is empty.
#[allow(clippy::too_many_arguments)]
pub(super) fn filter_grad_image<E: Elem>(
    kind: Tile,
    x: &[E],
    g: &Geometry,
    dy: &[E],
    f: usize,
    acc: &mut [E],
    bias: &mut [E],
    scratch: &mut Vec<E>,
) -> bool {
    let c = g.c;
    if acc.len() != kind.positions() * c * f || dy.len() < g.pixels() * f || x.len() < g.image() {
        return false;
    }
    let Some((t, v, e)) = transformed_image(kind, x, g, f, scratch) else { return false };
    let count = t.count();
    let layout = t.layout(g);
    let transformed = match kind {
        Tile::F4 => winograd4::transform_output_grad(dy, &layout, f, e, (!bias.is_empty()).then_some(&mut *bias)),
        Tile::F2 => {
            let fast = match (as_f32(dy), as_f32_mut(e), as_f32_mut(bias)) {
                (Some(dyf), Some(ef), Some(bf)) => {
                    let bf = if bf.is_empty() { None } else { Some(bf) };
                    winograd512::transform_output_grad(dyf, &layout, f, ef, bf)
                }
                _ => false,
            };
            if !fast {
                transform_output_grad(dy, g.oh, g.ow, f, t.th, t.tw, e);
                if !bias.is_empty() {
                    super::reduce::add_rows(bias, dy);
                }
            }
            true
        }
    };
    if !transformed {
        return false;
    }
    // `acc[ξ] (c x f) += v[ξ]ᵀ (c x tiles) · e[ξ] (tiles x f)`, both row-major.
    if let (Some(vf), Some(ef), Some(af)) = (as_f32(v), as_f32(e), as_f32_mut(acc))
        && small_product(c, f)
    {
        let index = tile_index(count, c);
        return af.chunks_exact_mut(c * f).zip(ef.chunks_exact(count * f)).enumerate().all(|(xi, (ax, ex))| {
            let taps = index.over(&vf[xi * count * c..]);
            filter_grad_f32(taps, ex, ax, (count, c, f))
        });
    }
    acc.chunks_exact_mut(c * f).enumerate().all(|(xi, ax)| {
        let lhs = Mat::transposed(&v[xi * count * c..], c);
        let rhs = Mat { data: &e[xi * count * f..], rs: f, cs: 1 };
        gemm(c, f, count, ax, true, lhs, rhs, 1)
    })
}

/// Whether the 16 products of a `c` to `f` channel image are left to the microkernels
/// rather than `gemm`: below 64 channels `gemm`'s packing costs more than it saves; from 64
/// on its cache blocking wins (VGG's 64- and 128-channel layers: 3 % slower per step with
/// the microkernels, measured engine against engine).
fn small_product(c: usize, f: usize) -> bool {
    c < 64 && f < 64
}

/// Where tile `t`'s channel `k` of one position lies in the transformed image, as
/// `microkernel::Taps` reads it: `base[t] + offset[k]` from that position's first channel.
fn tile_index(count: usize, c: usize) -> TapIndex {
    TapIndex::new((0..count).map(|t| t * c).collect(), (0..c).collect())
}

/// The image's tiling, its transformed tiles (`Bᵀ d B`, a `tiles x c` matrix per
/// position) and the rest of `scratch`: room for a `tiles x f` matrix per position. None
/// if a buffer does not fit.
fn transformed_image<'s, E: Elem>(
    kind: Tile,
    x: &[E],
    g: &Geometry,
    f: usize,
    scratch: &'s mut Vec<E>,
) -> Option<(Tiles, &'s mut [E], &'s mut [E])> {
    let t = Tiles::of(g, kind);
    let per_channel = kind.positions() * t.count();
    let scratch = super::buffer::line_aligned(scratch, t.ph * t.pw * g.c + per_channel * (g.c + f));
    let (padded, rest) = scratch.split_at_mut(t.ph * t.pw * g.c);
    let (v, out) = rest.split_at_mut(per_channel * g.c);
    if kind == Tile::F4 {
        return winograd4::transform_input(x, &t.layout(g), g.c, v).then_some((t, v, out));
    }
    let fast = match (as_f32(x), as_f32_mut(v)) {
        (Some(xf), Some(vf)) => winograd512::transform_input(xf, &t.layout(g), g.c, vf),
        _ => false,
    };
    if !fast {
        pad(x, g, &t, padded);
        transform_input(padded, t.pw, g.c, t.th, t.tw, v);
    }
    Some((t, v, out))
}

/// The image at `(top, left)` of a zeroed `ph x pw` plane.
fn pad<E: Elem>(x: &[E], g: &Geometry, t: &Tiles, padded: &mut [E]) {
    padded.iter_mut().for_each(|v| *v = E::zero());
    let c = g.c;
    let cols = g.w.min(t.pw.saturating_sub(g.left));
    for iy in 0..g.h.min(t.ph.saturating_sub(g.top)) {
        let src = &x[iy * g.w * c..][..cols * c];
        padded[((iy + g.top) * t.pw + g.left) * c..][..cols * c].copy_from_slice(src);
    }
}

/// `(o0, o1, o2, o3)`: four consecutive `n`-element slices of `out`.
fn four<E>(out: &mut [E], n: usize) -> (&mut [E], &mut [E], &mut [E], &mut [E]) {
    let (o0, rest) = out.split_at_mut(n);
    let (o1, rest) = rest.split_at_mut(n);
    let (o2, o3) = rest.split_at_mut(n);
    (o0, o1, o2, &mut o3[..n])
}

/// `Bᵀ (d0, d1, d2, d3)` = `(d0 - d2, d1 + d2, d2 - d1, d1 - d3)`, lane by lane.
#[inline(always)]
fn input_1d<E: Elem>(d: [&[E]; 4], out: &mut [E], n: usize) {
    let (o0, o1, o2, o3) = four(out, n);
    let (d0, d1, d2, d3) = (&d[0][..n], &d[1][..n], &d[2][..n], &d[3][..n]);
    for k in 0..n {
        o0[k] = d0[k] - d2[k];
        o1[k] = d1[k] + d2[k];
        o2[k] = d2[k] - d1[k];
        o3[k] = d1[k] - d3[k];
    }
}

multiversion! {
    /// `v` (16 `tiles x c` matrices, one per position `(i, j)` of a tile) = `Bᵀ d B` of
    /// every 4×4 block `d` of the padded image whose corner is at `(2 ty, 2 tx)`.
    fn transform_input<E: Elem>(padded: &[E], pw: usize, c: usize, th: usize, tw: usize, v: &mut [E]) {
        let count = th * tw;
        let mut tmp = vec![E::zero(); TILE * c];
        let mut out = vec![E::zero(); TILE * c];
        for t in 0..count {
            let base = (2 * (t / tw) * pw + 2 * (t % tw)) * c;
            // Columns first: `tmp[j]` (4 c-vectors over i) = `Bᵀ` of column j.
            for j in 0..4 {
                let d = std::array::from_fn(|i| &padded[base + (i * pw + j) * c..][..c]);
                input_1d(d, &mut tmp[j * 4 * c..][..4 * c], c);
            }
            // Then rows: `out[i][0..4]` = `Bᵀ` of row i of `tmp`, read across its columns.
            for i in 0..4 {
                let d = std::array::from_fn(|j| &tmp[(j * 4 + i) * c..][..c]);
                input_1d(d, &mut out[i * 4 * c..][..4 * c], c);
            }
            for (xi, o) in out.chunks_exact(c).enumerate() {
                v[(xi * count + t) * c..][..c].copy_from_slice(o);
            }
        }
    }
}

multiversion! {
    /// `y` = `Aᵀ m A` of every tile, where `Aᵀ (m0, m1, m2, m3) = (m0 + m1 + m2, m1 - m2 -
    /// m3)`; `m` holds 16 `tiles x f` products. Pixels past the output's edge are dropped.
    fn transform_output<E: Elem>(m: &[E], oh: usize, ow: usize, f: usize, th: usize, tw: usize, y: &mut [E]) {
        let count = th * tw;
        let mut tmp = vec![E::zero(); 8 * f];
        for t in 0..count {
            let (ty, tx) = (t / tw, t % tw);
            let at = |xi: usize| &m[xi * count * f + t * f..][..f];
            // `tmp[r][j]` = row r of `Aᵀ` applied down column j.
            for j in 0..4 {
                let (m0, m1, m2, m3) = (at(j), at(4 + j), at(8 + j), at(12 + j));
                let (r0, r1) = tmp.split_at_mut(4 * f);
                let (r0, r1) = (&mut r0[j * f..][..f], &mut r1[j * f..][..f]);
                for k in 0..f {
                    r0[k] = m0[k] + m1[k] + m2[k];
                    r1[k] = m1[k] - m2[k] - m3[k];
                }
            }
            for r in 0..2 {
                let oy = 2 * ty + r;
                if oy >= oh {
                    continue;
                }
                let row = &tmp[r * 4 * f..][..4 * f];
                let (q0, q1, q2, q3) = (&row[..f], &row[f..2 * f], &row[2 * f..3 * f], &row[3 * f..4 * f]);
                let ox = 2 * tx;
                let left = &mut y[(oy * ow + ox) * f..][..f];
                for k in 0..f {
                    left[k] = q0[k] + q1[k] + q2[k];
                }
                if ox + 1 < ow {
                    let right = &mut y[(oy * ow + ox + 1) * f..][..f];
                    for k in 0..f {
                        right[k] = q1[k] - q2[k] - q3[k];
                    }
                }
            }
        }
    }
}

/// `A (a, b)` = `(a, a + b, a - b, -b)`, lane by lane.
#[inline(always)]
fn grad_1d<E: Elem>(a: &[E], b: &[E], out: &mut [E], n: usize) {
    let (o0, o1, o2, o3) = four(out, n);
    let (a, b) = (&a[..n], &b[..n]);
    for k in 0..n {
        o0[k] = a[k];
        o1[k] = a[k] + b[k];
        o2[k] = a[k] - b[k];
        o3[k] = -b[k];
    }
}

multiversion! {
    /// `e` (16 `tiles x f` matrices, like the forward products) = `A ∂y Aᵀ` of every 2×2
    /// block of the output gradient, zeros past its edge: the adjoint of `transform_output`.
    fn transform_output_grad<E: Elem>(dy: &[E], oh: usize, ow: usize, f: usize, th: usize, tw: usize, e: &mut [E]) {
        let count = th * tw;
        let zeros = vec![E::zero(); f];
        let mut tmp = vec![E::zero(); 8 * f];
        let mut out = vec![E::zero(); TILE * f];
        for t in 0..count {
            let (oy, ox) = (2 * (t / tw), 2 * (t % tw));
            let at = |r: usize, s: usize| {
                if oy + r < oh && ox + s < ow { &dy[((oy + r) * ow + ox + s) * f..][..f] } else { &zeros[..] }
            };
            // Columns first: `tmp[s]` (4 f-vectors over i) = `A` down column s.
            for s in 0..2 {
                grad_1d(at(0, s), at(1, s), &mut tmp[s * 4 * f..][..4 * f], f);
            }
            // Then rows: `out[i][0..4]` = `A` across row i of `tmp`.
            for i in 0..4 {
                let (a, b) = (&tmp[i * f..][..f], &tmp[(4 + i) * f..][..f]);
                grad_1d(a, b, &mut out[i * 4 * f..][..4 * f], f);
            }
            for (xi, o) in out.chunks_exact(f).enumerate() {
                e[(xi * count + t) * f..][..f].copy_from_slice(o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::conv::{Method, conv_image, filter_grad_image as gemm_filter_grad};

    fn geometry(n: usize, h: usize, w: usize, c: usize, same: bool) -> Geometry {
        let p = usize::from(same);
        let (oh, ow) = (h + 2 * p - 2, w + 2 * p - 2);
        Geometry { n, h, w, c, kh: 3, kw: 3, oh, ow, sh: 1, sw: 1, top: p, left: p }
    }

    fn data<E: Elem>(len: usize, seed: u64) -> Vec<E> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                E::from((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0).unwrap_or_else(E::zero)
            })
            .collect()
    }

    fn f64_of<E: Elem>(v: E) -> f64 {
        num_traits::ToPrimitive::to_f64(&v).unwrap_or(f64::NAN)
    }

    /// The largest difference relative to the largest magnitude of `b`; NaN where `a`
    /// holds a NaN (`f64::max` would drop it, and a NaN is an element left unwritten).
    fn worst<E: Elem>(a: &[E], b: &[E]) -> f64 {
        if a.iter().any(|x| x.is_nan()) {
            return f64::NAN;
        }
        let scale = b.iter().map(|v| f64_of(v.abs())).fold(1e-30, f64::max);
        a.iter().zip(b).map(|(x, y)| f64_of((*x - *y).abs()) / scale).fold(0.0, f64::max)
    }

    /// Forward output and filter gradient of `kind` against `im2col` + `gemm`, for odd and
    /// even sizes, with and without padding.
    fn matches_gemm<E: Elem>(kind: Tile, tol: f64) {
        for (h, w, c, f, same) in [
            (6, 6, 3, 5, true),
            (7, 5, 4, 2, true),
            (9, 8, 2, 3, false),
            (3, 3, 5, 4, false),
            (5, 4, 33, 35, true),
            (7, 6, 16, 32, true),
            (6, 9, 32, 16, false),
            (13, 11, 16, 16, true),
            (28, 28, 16, 16, true),
            (10, 9, 16, 48, false),
        ] {
            let g = geometry(1, h, w, c, same);
            let x = data::<E>(g.image(), 1 + h as u64);
            let wt = data::<E>(9 * c * f, 2 + c as u64);
            let dy = data::<E>(g.pixels() * f, 3 + f as u64);
            let mut want = vec![E::zero(); g.pixels() * f];
            let mut scratch = Vec::new();
            assert!(conv_image(&x, &g, &Method::Gemm, &wt, f, None, &mut want, &mut scratch, 1));
            // NaN first: the output may start uninitialized, so every element must be
            // written (a NaN left over fails the comparison).
            let mut got = vec![E::nan(); g.pixels() * f];
            let u = kind.transform_filter(&wt, c, f);
            assert!(forward_image(kind, &x, &g, &u, f, None, None, &mut got, &mut scratch, 1));
            let e = worst(&got, &want);
            assert!(e < tol, "{kind:?} forward {h}x{w}x{c}->{f} same={same}: relative error {e}");

            let mut want = vec![E::zero(); 9 * c * f];
            assert!(gemm_filter_grad(&x, &g, &Method::Gemm, &dy, f, &mut want, &mut [], &mut scratch));
            let mut acc = vec![E::zero(); kind.positions() * c * f];
            assert!(filter_grad_image(kind, &x, &g, &dy, f, &mut acc, &mut [], &mut scratch));
            let got = kind.untransform_filter_grad(&acc, c, f);
            let e = worst(&got, &want);
            assert!(e < tol, "{kind:?} filter gradient {h}x{w}x{c}->{f} same={same}: relative error {e}");
        }
    }

    #[test]
    fn forward_and_filter_gradient_equal_the_patch_products_f32() {
        matches_gemm::<f32>(Tile::F2, 1e-5);
    }

    #[test]
    fn forward_and_filter_gradient_equal_the_patch_products_f64() {
        matches_gemm::<f64>(Tile::F2, 1e-13);
    }

    /// F(4×4, 3×3) multiplies by ⅙ and 1⁄24 and adds up to 8 times a value: a few parts in
    /// a million in f32 (on AVX-512 where the channels are in sixteens, else the portable
    /// loops).
    #[test]
    fn f4_forward_and_filter_gradient_equal_the_patch_products() {
        matches_gemm::<f32>(Tile::F4, 2e-5);
        matches_gemm::<f64>(Tile::F4, 1e-12);
    }

    /// The register transforms (AVX-512 or AVX2, where the CPU has them) against the
    /// portable loops, bit for bit, on odd and even output sizes; the forward's fused bias
    /// and ReLU against `bias_activation`.
    #[test]
    fn wide_transforms_equal_the_portable_loops_bit_for_bit() {
        if !winograd512::runs(8) {
            return;
        }
        // Sixteens run on AVX-512 where it is present, AVX2 otherwise; eights on AVX2.
        let shapes = [
            (5, 7, 16, true),
            (8, 6, 32, false),
            (1, 1, 16, true),
            (4, 3, 16, false),
            (5, 6, 8, true),
            (7, 4, 24, false),
        ];
        for (h, w, c, same) in shapes {
            let g = geometry(1, h, w, c, same);
            let t = Tiles::of(&g, Tile::F2);
            let (l, count, (oh, ow)) = (t.layout(&g), t.count(), (g.oh, g.ow));
            // Negative zeros in the input: the padding and `-b` must keep them as they are.
            let mut x = data::<f32>(g.image(), 11);
            x.iter_mut().step_by(7).for_each(|v| *v = -0.0);
            let mut padded = vec![0f32; t.ph * t.pw * c];
            pad(&x, &g, &t, &mut padded);
            let (mut want, mut got) = (vec![0f32; TILE * count * c], vec![1f32; TILE * count * c]);
            transform_input(&padded, t.pw, c, t.th, t.tw, &mut want);
            assert!(winograd512::transform_input(&x, &l, c, &mut got));
            assert!(want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "input {h}x{w}x{c}");

            let m = data::<f32>(TILE * count * c, 12);
            let bias = data::<f32>(c, 13);
            for (b, act) in [(None, FusedActivation::Linear), (Some(&bias[..]), FusedActivation::Relu)] {
                let mut want = vec![0f32; oh * ow * c];
                transform_output(&m, oh, ow, c, t.th, t.tw, &mut want);
                if let Some(b) = b {
                    crate::kernels::cpu::elementwise::bias_activation(&mut want, b, act);
                }
                let mut got = vec![f32::NAN; oh * ow * c];
                assert!(winograd512::transform_output(&m, &l, c, b, act == FusedActivation::Relu, &mut got));
                assert!(want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "output {h}x{w}x{c}");
            }

            let dy = x[..oh * ow * c].to_vec();
            let (mut want, mut got) = (vec![0f32; TILE * count * c], vec![1f32; TILE * count * c]);
            transform_output_grad(&dy, oh, ow, c, t.th, t.tw, &mut want);
            let (mut want_bias, mut got_bias) = (bias.clone(), bias.clone());
            crate::kernels::cpu::reduce::add_rows(&mut want_bias, &dy);
            assert!(winograd512::transform_output_grad(&dy, &l, c, &mut got, Some(&mut got_bias)));
            assert!(want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "output grad {h}x{w}x{c}");
            // The bias gradient sums the same pixels tile by tile, not row by row.
            assert!(worst(&got_bias, &want_bias) < 1e-6, "bias gradient {h}x{w}x{c}");
            // Short buffers are refused, untouched.
            let mut y = vec![0f32; oh * ow * c];
            assert!(!winograd512::transform_output(&m[1..], &l, c, None, false, &mut y));
            assert!(!winograd512::transform_output(&m, &l, c, Some(&bias[1..]), false, &mut y));
            assert!(!winograd512::transform_output_grad(&dy[1..], &l, c, &mut got, None));
            assert!(!winograd512::transform_input(&x[1..], &l, c, &mut got));
            assert!(y.iter().all(|v| *v == 0.0));
        }
        // Channels in eights but not sixteens: AVX2's, never AVX-512's; fewer, the portable loops'.
        assert!(!winograd512::applies(24));
        assert!(!winograd512::runs(12));
    }

    #[test]
    fn transform_filter_and_its_adjoint_agree() {
        // <transform(w), a> = <w, untransform(a)> for any w and a: the gradient is exact.
        let (c, f) = (3, 2);
        let w = data::<f64>(9 * c * f, 7);
        let a = data::<f64>(TILE * c * f, 8);
        let lhs: f64 = transform_filter(&w, c, f).iter().zip(&a).map(|(x, y)| x * y).sum();
        let rhs: f64 = w.iter().zip(untransform_filter_grad(&a, c, f)).map(|(x, y)| x * y).sum();
        assert!((lhs - rhs).abs() < 1e-12, "{lhs} vs {rhs}");
    }

    /// The best of `runs` timings of `reps` calls of `f`, in µs per call (the probes').
    fn best_of(runs: usize, reps: usize, mut f: Box<dyn FnMut() + '_>) -> f64 {
        let mut best = f64::MAX;
        for _ in 0..runs {
            let t = std::time::Instant::now();
            for _ in 0..reps {
                f();
            }
            best = best.min(t.elapsed().as_secs_f64() / reps as f64 * 1e6);
        }
        best
    }

    /// One 3×3 convolution's forward and filter gradient through `m`, per image in µs
    /// (`best_of(runs, reps)`), over data of `g`'s shape into `f` channels.
    fn method_times(g: &Geometry, m: &Method, f: usize, runs: usize, reps: usize) -> (f64, f64) {
        let c = g.c;
        let x = data::<f32>(g.image(), 1);
        let w = data::<f32>(9 * c * f, 2);
        let dy = data::<f32>(g.pixels() * f, 3);
        let mut y = vec![0f32; g.pixels() * f];
        let wf = m.filter(&w, c, f);
        let mut scratch = Vec::new();
        let fwd = best_of(
            runs,
            reps,
            Box::new(|| {
                conv_image(&x, g, m, &wf, f, None, &mut y, &mut scratch, 1);
            }),
        );
        let mut acc = vec![0f32; m.grad_len([3, 3, c, f])];
        let grad = best_of(
            runs,
            reps,
            Box::new(|| {
                gemm_filter_grad(&x, g, m, &dy, f, &mut acc, &mut [], &mut scratch);
            }),
        );
        (fwd, grad)
    }

    /// Per-image times of each method on the shapes of the specs' 3×3 layers; sets
    /// `MIN_CHANNELS`. `cargo test --release -p engine-runtime winograd_probe -- --ignored
    /// --nocapture`, pinned to one core; `PROBE_H=7` times only the 7×7 shapes. One hot
    /// image: a step's images come from memory, which can reverse a close call.
    #[test]
    #[ignore = "timing probe"]
    fn winograd_probe() {
        use crate::kernels::cpu::patches::PatchIndex;
        for (h, c, f) in [
            (28, 1, 16),
            (28, 1, 32),
            (28, 16, 16),
            (28, 32, 32),
            (14, 32, 32),
            (28, 64, 64),
            (14, 64, 128),
            (14, 128, 128),
            (7, 32, 32),
            (7, 64, 64),
            (7, 64, 128),
            (7, 128, 128),
            (15, 32, 32),
        ] {
            if std::env::var("PROBE_H").is_ok_and(|v| v != h.to_string()) {
                continue;
            }
            let g = geometry(1, h, h, c, true);
            let mut line = format!("{h}x{h} {c:>3}->{f:<3}");
            let methods = [
                ("direct", Method::Direct(PatchIndex::new(&g))),
                ("gemm", Method::Gemm),
                ("winograd", Method::Winograd(Tile::F2)),
                ("winograd4", Method::Winograd(Tile::F4)),
            ];
            for (name, m) in &methods {
                if matches!(m, Method::Direct(_)) && !crate::kernels::cpu::direct_conv::applies(g.patch(), f) {
                    continue;
                }
                let (fwd, grad) = method_times(&g, m, f, 3, 40);
                line += &format!("  {name}: fwd {fwd:7.1} us, filter grad {grad:7.1} us");
            }
            println!("{line}");
        }
    }

    #[test]
    #[ignore = "a timing probe"]
    fn strided_probe() {
        use crate::kernels::cpu::patches::PatchIndex;
        for (h, c, f) in [(28, 32, 32), (14, 32, 64), (28, 48, 48), (14, 64, 64), (14, 64, 128), (28, 16, 16)] {
            let o = h / 2;
            let g = Geometry { n: 1, h, w: h, c, kh: 3, kw: 3, oh: o, ow: o, sh: 2, sw: 2, top: 0, left: 0 };
            let mut line = format!("{h}x{h} {c}->{f} stride 2:");
            for (name, m) in [("direct", Method::Direct(PatchIndex::new(&g))), ("gemm", Method::Gemm)] {
                let (fwd, grad) = method_times(&g, &m, f, 5, 40);
                line += &format!("  {name}: fwd {fwd:6.1} us, filter grad {grad:6.1} us");
            }
            println!("{line}");
        }
    }

    #[test]
    #[ignore = "a timing probe"]
    fn winograd_breakdown_probe() {
        let time = |f: Box<dyn FnMut() + '_>| best_of(5, 200, f);
        for (h, c, f) in [(28, 16, 16), (28, 32, 32)] {
            let g = geometry(1, h, h, c, true);
            let x = data::<f32>(g.image(), 1);
            let u = Tile::F4.transform_filter(&data::<f32>(9 * c * f, 2), c, f);
            let mut y = vec![std::mem::MaybeUninit::<f32>::uninit(); g.pixels() * f];
            let mut scratch = Vec::new();
            let t = Tiles::of(&g, Tile::F4);
            let input = time(Box::new(|| {
                transformed_image(Tile::F4, &x, &g, f, &mut scratch);
            }));
            let (_, v, m) = transformed_image(Tile::F4, &x, &g, f, &mut scratch).expect("the buffers fit");
            let (v, mut m) = (v.to_vec(), m.to_vec());
            let prod = time(Box::new(|| {
                products(&v, &u, &mut m, t.count(), c, f, 1);
            }));
            let out = time(Box::new(|| {
                winograd4::transform_output(&m, &t.layout(&g), f, None, None, true, None, &mut y);
            }));
            println!("{h}x{h} {c}->{f}: input {input:.2} us, products {prod:.2} us, output {out:.2} us");
        }
    }

    /// The F(4×4) input transform over a batch written just before, as in a training step
    /// (the probe above reuses one image, which stays in L1). `cargo test --release -p
    /// engine-runtime winograd_cold_input_probe -- --ignored --nocapture`, pinned.
    #[test]
    #[ignore = "a timing probe"]
    fn winograd_cold_input_probe() {
        let (n, h, c) = (64, 28, 16);
        let g = geometry(1, h, h, c, true);
        let mut x = data::<f32>(g.image() * n, 1);
        let mut scratch = Vec::new();
        let mut best = f64::MAX;
        for rep in 0..20 {
            x.iter_mut().for_each(|v| *v += 1e-3 * rep as f32);
            let s = std::time::Instant::now();
            for i in 0..n {
                let image = &x[i * g.image()..(i + 1) * g.image()];
                let _ = transformed_image(Tile::F4, image, &g, c, &mut scratch);
            }
            best = best.min(s.elapsed().as_secs_f64());
        }
        println!("input transform per image of a batch written just before: {:.2} us", best / n as f64 * 1e6);
    }

    /// F(4×4)'s output pooled in registers equals the convolution stored and then pooled,
    /// bit for bit: values and argmax, with and without the skip, the bias's ReLU, a last
    /// tile cut short (10 wide: three tiles of 4), a single window; an odd output is
    /// refused with nothing written.
    #[test]
    fn the_pooled_output_transform_equals_convolving_then_pooling() -> crate::Result<()> {
        use crate::kernels::cpu::pool::{Plane, pool_image};
        use engine_graph::ops::{Padding, Window};
        if !winograd512::applies(16) {
            return Ok(());
        }
        let win = Window { kernel: [2, 2], strides: [2, 2], padding: Padding::Valid };
        for (h, w, c, f, same, with_skip, relu) in [
            (28, 28, 16, 16, true, true, true),
            (14, 14, 32, 32, true, false, false),
            (6, 10, 16, 32, true, true, false),
            (8, 8, 16, 16, false, false, true),
            (2, 2, 16, 16, true, true, true),
        ] {
            let g = geometry(1, h, w, c, same);
            let pl = Plane::for_probe(&win, [g.oh, g.ow], f)?;
            // Small integers make ties between the cells of a window.
            let x: Vec<f32> = data::<f32>(g.image(), 1).iter().map(|v| (v * 4.0).round()).collect();
            let u = Tile::F4.transform_filter(
                &data::<f32>(9 * c * f, 2).iter().map(|v| (v * 2.0).round()).collect::<Vec<_>>(),
                c,
                f,
            );
            let bias = data::<f32>(f, 3);
            let skip = with_skip.then(|| data::<f32>(g.pixels() * f, 4));
            let act = if relu { FusedActivation::Relu } else { FusedActivation::Linear };
            let (mut y, mut scratch) = (vec![0f32; g.pixels() * f], Vec::new());
            assert!(forward_image(
                Tile::F4,
                &x,
                &g,
                &u,
                f,
                Some((&bias, act)),
                skip.as_deref(),
                &mut y,
                &mut scratch,
                1
            ));
            let (mut want, mut want_at, mut pos) = (vec![0f32; pl.pooled()], vec![0i32; pl.pooled()], vec![0i32; f]);
            pool_image(&y, &mut want, &mut want_at, &mut pos, &pl);
            let mut got = vec![std::mem::MaybeUninit::new(f32::NAN); pl.pooled()];
            let mut got_at = vec![std::mem::MaybeUninit::new(-7i32); pl.pooled()];
            let case = format!("{h}x{w} {c}->{f}, same {same}, skip {with_skip}, relu {relu}");
            let ran = forward_pooled(
                Tile::F4,
                &x,
                &g,
                &u,
                f,
                (&bias, act),
                skip.as_deref(),
                &mut got,
                &mut got_at,
                &mut scratch,
                1,
            );
            assert!(ran, "{case}: not run");
            // SAFETY: initialized above (NaN and -7), and overwritten.
            let (got, got_at): (Vec<f32>, Vec<i32>) = unsafe {
                (got.iter().map(|v| v.assume_init()).collect(), got_at.iter().map(|v| v.assume_init()).collect())
            };
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{case}: values");
            assert_eq!(got_at, want_at, "{case}: argmax");
        }
        // 7x7 outputs leave a window cut in half: refused, untouched.
        let g = geometry(1, 7, 7, 16, true);
        let pl_ok = Plane::for_probe(&win, [g.oh, g.ow], 16)?;
        let mut got = vec![std::mem::MaybeUninit::new(1f32); pl_ok.pooled()];
        let mut at = vec![std::mem::MaybeUninit::new(5i32); pl_ok.pooled()];
        let u = Tile::F4.transform_filter(&data::<f32>(9 * 16 * 16, 2), 16, 16);
        let bias = data::<f32>(16, 3);
        let x = data::<f32>(g.image(), 1);
        let ran = forward_pooled(
            Tile::F4,
            &x,
            &g,
            &u,
            16,
            (&bias, FusedActivation::Relu),
            None,
            &mut got,
            &mut at,
            &mut Vec::new(),
            1,
        );
        assert!(!ran);
        // SAFETY: initialized above.
        assert!(got.iter().zip(&at).all(|(v, a)| unsafe { v.assume_init() == 1.0 && a.assume_init() == 5 }));
        Ok(())
    }

    #[test]
    fn a_buffer_that_does_not_fit_is_refused() {
        let g = geometry(1, 4, 4, 2, true);
        let mut scratch = Vec::new();
        let mut y = vec![0f32; g.pixels() * 3];
        for kind in [Tile::F2, Tile::F4] {
            let u = vec![0f32; kind.positions() * 6];
            assert!(!forward_image(kind, &[0f32; 5], &g, &u, 3, None, None, &mut y, &mut scratch, 1));
            let x = vec![0f32; g.image()];
            assert!(!forward_image(kind, &x, &g, &[0f32; 7], 3, None, None, &mut y, &mut scratch, 1));
            assert!(!forward_image(kind, &x, &g, &u, 3, None, Some(&[0f32; 7]), &mut y, &mut scratch, 1));
        }
    }
}
