//! Winograd's F(4×4, 3×3): a 4×4 block of output pixels from a 6×6 block of the input
//! with 36 multiplications per channel pair instead of 144, against F(2×2, 3×3)'s 16 for
//! 36 (`winograd`). Its products do 44 % fewer multiply-adds than F(2×2, 3×3)'s, and its
//! transformed tiles take 2.25 floats per output pixel instead of 4, which is what the
//! 16-channel convolutions of the residual model wait for: writing and reading the
//! transformed tiles, not the arithmetic.
//!
//! The price is rounding: the transforms multiply by 2, 4, 5 and 8 and the filter's by ⅙
//! and 1⁄24, so results differ from the direct sum by a few parts in a million (f32)
//! instead of a few ulps; `winograd` tests both against `im2col` + `gemm`. The matrices
//! are Lavin and Gray's (2015):
//!
//! ```text
//! Bᵀ = [4  0 -5  0 1 0]   G = [ ¼     0     0 ]   Aᵀ = [1 1  1 1  1 0]
//!      [0 -4 -4  1 1 0]       [-⅙    -⅙    -⅙ ]        [0 1 -1 2 -2 0]
//!      [0  4 -4 -1 1 0]       [-⅙     ⅙    -⅙ ]        [0 1  1 4  4 0]
//!      [0 -2 -1  2 1 0]       [1⁄24  1⁄12  ⅙  ]        [0 1 -1 8 -8 1]
//!      [0  2 -1 -2 1 0]       [1⁄24 -1⁄12  ⅙  ]
//!      [0  4  0 -5 0 1]       [ 0     0     1 ]
//! ```
//!
//! The tile transforms run on AVX-512 registers where `winograd4_512` applies and as
//! portable loops otherwise (f64, or channels not in sixteens).

// Indexed loops over the tiles' constant bounds read as the matrices do.
#![allow(clippy::needless_range_loop)]

use super::{buffer::Elem, winograd4_512, winograd512::Layout};

/// Output pixels along a tile's side.
pub(super) const OUT: usize = 4;
/// Input pixels along a tile's side.
const IN: usize = OUT + 2;
/// Positions of a transformed tile: the number of products per image.
pub(super) const POSITIONS: usize = IN * IN;

const G: [[f64; 3]; IN] = [
    [0.25, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// A transform constant in `E` (every one is exact in f32 and f64; the fallback is never
/// taken).
fn constant<E: Elem>(v: f64) -> E {
    E::from(v).unwrap_or_else(E::zero)
}

fn g<E: Elem>() -> [[E; 3]; IN] {
    G.map(|row| row.map(constant))
}

/// The filter for the forward products: `u[ξ]` (36 row-major `c x f` matrices) = `G w Gᵀ`
/// for every channel pair, from the HWIO 3×3 filter `w`.
pub(super) fn transform_filter<E: Elem>(w: &[E], c: usize, f: usize) -> Vec<E> {
    let (cf, g) = (c * f, g::<E>());
    let mut u = vec![E::zero(); POSITIONS * cf];
    if w.len() < 9 * cf {
        return u;
    }
    for e in 0..cf {
        // `G w` (6×3), then `(G w) Gᵀ` (6×6).
        let gw: [[E; 3]; IN] = std::array::from_fn(|i| {
            std::array::from_fn(|b| (0..3).fold(E::zero(), |s, a| s + g[i][a] * w[(a * 3 + b) * cf + e]))
        });
        for i in 0..IN {
            for j in 0..IN {
                u[(i * IN + j) * cf + e] = (0..3).fold(E::zero(), |s, b| s + gw[i][b] * g[j][b]);
            }
        }
    }
    u
}

/// The HWIO 3×3 filter gradient from its transformed form `acc` (36 `c x f` matrices):
/// `Gᵀ acc G`, the adjoint of `transform_filter`.
pub(super) fn untransform_filter_grad<E: Elem>(acc: &[E], c: usize, f: usize) -> Vec<E> {
    let (cf, g) = (c * f, g::<E>());
    let mut w = vec![E::zero(); 9 * cf];
    if acc.len() < POSITIONS * cf {
        return w;
    }
    for e in 0..cf {
        // `acc G` (6×3), then `Gᵀ (acc G)` (3×3).
        let ag: [[E; 3]; IN] = std::array::from_fn(|i| {
            std::array::from_fn(|b| (0..IN).fold(E::zero(), |s, j| s + acc[(i * IN + j) * cf + e] * g[j][b]))
        });
        for a in 0..3 {
            for b in 0..3 {
                w[(a * 3 + b) * cf + e] = (0..IN).fold(E::zero(), |s, i| s + g[i][a] * ag[i][b]);
            }
        }
    }
    w
}

/// Whether `l` tiles an output of `oh x ow` pixels in 4×4 blocks, and buffers of `image`
/// (output or its gradient), `tiles` (transformed) and `bias` floats hold what they touch.
pub(super) fn output_fits(l: &Layout, f: usize, image: usize, tiles: usize, bias: Option<usize>) -> bool {
    image >= l.oh * l.ow * f
        && tiles >= POSITIONS * l.count() * f
        && l.oh <= OUT * l.th
        && l.ow <= OUT * l.tw
        && bias.is_none_or(|b| b >= f)
}

/// `v` (36 `tiles x c` matrices, one per position `(i, j)`) = `Bᵀ d B` of every 6×6 block
/// `d` of the image `x` (`h x w x c`), corner at `(4 ty - top, 4 tx - left)`, zeros outside
/// the image. False, having done nothing, if a buffer is too short.
pub(super) fn transform_input<E: Elem>(x: &[E], l: &Layout, c: usize, v: &mut [E]) -> bool {
    if x.len() < l.h * l.w * c || v.len() < POSITIONS * l.count() * c {
        return false;
    }
    if let (Some(xf), Some(vf)) = (super::buffer::as_f32(x), super::buffer::as_f32_mut(v))
        && winograd4_512::transform_input(xf, l, c, vf)
    {
        return true;
    }
    let count = l.count();
    let inside = |at: usize, pad: usize, size: usize| at >= pad && at - pad < size;
    let mut d = vec![E::zero(); POSITIONS];
    for t in 0..count {
        let (y0, x0) = (OUT * (t / l.tw), OUT * (t % l.tw));
        for k in 0..c {
            for i in 0..IN {
                for j in 0..IN {
                    let (y, xx) = (y0 + i, x0 + j);
                    d[i * IN + j] = if inside(y, l.top, l.h) && inside(xx, l.left, l.w) {
                        x[((y - l.top) * l.w + xx - l.left) * c + k]
                    } else {
                        E::zero()
                    };
                }
            }
            let out = input_2d(&d);
            for (xi, o) in out.iter().enumerate() {
                v[(xi * count + t) * c + k] = *o;
            }
        }
    }
    true
}

/// `Bᵀ d B` of one 6×6 block, row-major.
fn input_2d<E: Elem>(d: &[E]) -> [E; POSITIONS] {
    let mut tmp = [E::zero(); POSITIONS];
    for j in 0..IN {
        let col = input_1d(std::array::from_fn(|i| d[i * IN + j]));
        for i in 0..IN {
            tmp[i * IN + j] = col[i];
        }
    }
    let mut out = [E::zero(); POSITIONS];
    for i in 0..IN {
        let row = input_1d(std::array::from_fn(|j| tmp[i * IN + j]));
        out[i * IN..][..IN].copy_from_slice(&row);
    }
    out
}

/// `Bᵀ d` for a 6-vector.
fn input_1d<E: Elem>(d: [E; IN]) -> [E; IN] {
    let (two, four, five): (E, E, E) = (constant(2.0), constant(4.0), constant(5.0));
    let (t0, t1) = (d[4] - four * d[2], d[3] - four * d[1]);
    let (t2, t3) = (d[4] - d[2], d[3] - d[1]);
    [
        four * d[0] + (d[4] - five * d[2]),
        t0 + t1,
        t0 - t1,
        t2 + two * t3,
        t2 - two * t3,
        four * d[1] + (d[5] - five * d[3]),
    ]
}

/// `y` = `Aᵀ m A` of every tile (`m`: 36 `tiles x f` matrices), plus `bias`, plus `skip`
/// (an addend of `y`'s layout), then ReLU if `relu`, then zero wherever `gate` (a ReLU's
/// output, of `y`'s layout) is not positive, as `ReluGrad(gate, y)`; pixels past the
/// output's edge are dropped. Every pixel of the plane is written and none is read, so `y`
/// may start uninitialized (zeroing a batch's convolution output first was 2.5 % of the
/// residual model's step). False if a buffer does not fit.
#[allow(clippy::too_many_arguments, reason = "the output transform's epilogue operands, each optional")]
pub(super) fn transform_output<E: Elem>(
    m: &[E],
    l: &Layout,
    f: usize,
    bias: Option<&[E]>,
    skip: Option<&[E]>,
    relu: bool,
    gate: Option<&[E]>,
    y: &mut [std::mem::MaybeUninit<E>],
) -> bool {
    let image = l.oh * l.ow * f;
    if !output_fits(l, f, y.len(), m.len(), bias.map(<[E]>::len))
        || skip.is_some_and(|s| s.len() < image)
        || gate.is_some_and(|s| s.len() < image)
    {
        return false;
    }
    if let (Some(mf), Some(yf), Some(bf), Some(sf), Some(gf)) = (
        super::buffer::as_f32(m),
        super::buffer::as_f32_uninit(y),
        super::buffer::optional_f32(bias),
        super::buffer::optional_f32(skip),
        super::buffer::optional_f32(gate),
    ) && winograd4_512::transform_output(mf, l, f, bf, sf, relu, gf, yf)
    {
        return true;
    }
    let count = l.count();
    for t in 0..count {
        let (oy, ox) = (OUT * (t / l.tw), OUT * (t % l.tw));
        for k in 0..f {
            let tile: [E; POSITIONS] = std::array::from_fn(|xi| m[(xi * count + t) * f + k]);
            let mut cols = [[E::zero(); IN]; OUT];
            for j in 0..IN {
                let col = output_1d(std::array::from_fn(|i| tile[i * IN + j]));
                for r in 0..OUT {
                    cols[r][j] = col[r];
                }
            }
            for (r, row) in cols.iter().enumerate() {
                let px = output_1d(*row);
                for (s, v) in px.into_iter().enumerate() {
                    if oy + r < l.oh && ox + s < l.ow {
                        let at = ((oy + r) * l.ow + ox + s) * f + k;
                        let mut v = bias.map_or(v, |b| v + b[k]);
                        v = skip.map_or(v, |sk| v + sk[at]);
                        if relu {
                            v = v.max(E::zero());
                        }
                        if gate.is_some_and(|g| g[at] <= E::zero() || g[at].is_nan()) {
                            v = E::zero();
                        }
                        y[at].write(v);
                    }
                }
            }
        }
    }
    true
}

/// `Aᵀ m` for a 6-vector.
fn output_1d<E: Elem>(m: [E; IN]) -> [E; OUT] {
    let (two, four, eight): (E, E, E) = (constant(2.0), constant(4.0), constant(8.0));
    let (a, b, c, d) = (m[1] + m[2], m[1] - m[2], m[3] + m[4], m[3] - m[4]);
    [m[0] + a + c, b + two * d, a + four * c, b + eight * d + m[5]]
}

/// `e` (36 `tiles x f` matrices) = `A ∂y Aᵀ` of every 4×4 block of `dy`, zeros past its
/// edge: the adjoint of `transform_output`. With `bias`, `dy`'s pixels are also added to
/// it (the bias gradient). False if a buffer does not fit.
pub(super) fn transform_output_grad<E: Elem>(
    dy: &[E],
    l: &Layout,
    f: usize,
    e: &mut [E],
    mut bias: Option<&mut [E]>,
) -> bool {
    if !output_fits(l, f, dy.len(), e.len(), bias.as_ref().map(|b| b.len())) {
        return false;
    }
    if let (Some(df), Some(ef)) = (super::buffer::as_f32(dy), super::buffer::as_f32_mut(e)) {
        let bf = match bias.as_deref_mut() {
            None => Some(None),
            Some(b) => super::buffer::as_f32_mut(b).map(Some),
        };
        if let Some(bf) = bf
            && winograd4_512::transform_output_grad(df, l, f, ef, bf)
        {
            return true;
        }
    }
    if let Some(b) = bias {
        super::reduce::add_rows(b, &dy[..l.oh * l.ow * f]);
    }
    let count = l.count();
    for t in 0..count {
        let (oy, ox) = (OUT * (t / l.tw), OUT * (t % l.tw));
        for k in 0..f {
            let at = |r: usize, s: usize| {
                if oy + r < l.oh && ox + s < l.ow { dy[((oy + r) * l.ow + ox + s) * f + k] } else { E::zero() }
            };
            let mut cols = [[E::zero(); OUT]; IN];
            for s in 0..OUT {
                let col = grad_1d(std::array::from_fn(|r| at(r, s)));
                for i in 0..IN {
                    cols[i][s] = col[i];
                }
            }
            for (i, row) in cols.iter().enumerate() {
                for (j, v) in grad_1d(*row).into_iter().enumerate() {
                    e[((i * IN + j) * count + t) * f + k] = v;
                }
            }
        }
    }
    true
}

/// `A g` for a 4-vector: the columns of `Aᵀ`.
fn grad_1d<E: Elem>(g: [E; OUT]) -> [E; IN] {
    let (two, four, eight): (E, E, E) = (constant(2.0), constant(4.0), constant(8.0));
    let (p, q) = (g[0] + g[2], g[1] + g[3]);
    let (p4, q4) = (g[0] + four * g[2], two * g[1] + eight * g[3]);
    [g[0], p + q, p - q, p4 + q4, p4 - q4, g[3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 1-D transforms against the matrices in the module's comment.
    #[test]
    fn one_dimensional_transforms_are_the_matrices() {
        const BT: [[f64; 6]; 6] = [
            [4., 0., -5., 0., 1., 0.],
            [0., -4., -4., 1., 1., 0.],
            [0., 4., -4., -1., 1., 0.],
            [0., -2., -1., 2., 1., 0.],
            [0., 2., -1., -2., 1., 0.],
            [0., 4., 0., -5., 0., 1.],
        ];
        const AT: [[f64; 6]; 4] = [
            [1., 1., 1., 1., 1., 0.],
            [0., 1., -1., 2., -2., 0.],
            [0., 1., 1., 4., 4., 0.],
            [0., 1., -1., 8., -8., 1.],
        ];
        let v: [f64; 6] = [0.3, -1.7, 2.5, 0.9, -0.4, 1.3];
        let got = input_1d(v);
        for i in 0..6 {
            let want: f64 = (0..6).map(|j| BT[i][j] * v[j]).sum();
            assert!((got[i] - want).abs() < 1e-12, "Bᵀ row {i}");
        }
        let got = output_1d(v);
        for i in 0..4 {
            let want: f64 = (0..6).map(|j| AT[i][j] * v[j]).sum();
            assert!((got[i] - want).abs() < 1e-12, "Aᵀ row {i}");
        }
        let g4 = [v[0], v[1], v[2], v[3]];
        let got = grad_1d(g4);
        for j in 0..6 {
            let want: f64 = (0..4).map(|i| AT[i][j] * g4[i]).sum();
            assert!((got[j] - want).abs() < 1e-12, "A row {j}");
        }
    }

    #[test]
    fn transform_filter_and_its_adjoint_agree() {
        let (c, f) = (3, 2);
        let w: Vec<f64> = (0..9 * c * f).map(|i| (i as f64 * 0.37).sin()).collect();
        let a: Vec<f64> = (0..POSITIONS * c * f).map(|i| (i as f64 * 0.91).cos()).collect();
        let lhs: f64 = transform_filter(&w, c, f).iter().zip(&a).map(|(x, y)| x * y).sum();
        let rhs: f64 = w.iter().zip(untransform_filter_grad(&a, c, f)).map(|(x, y)| x * y).sum();
        assert!((lhs - rhs).abs() < 1e-12, "{lhs} vs {rhs}");
    }
}
