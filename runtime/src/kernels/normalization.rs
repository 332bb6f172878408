//! Fused normalization on any backend, from burn's primitives over the input seen as
//! `[rows, features]`: the statistics reduce the rows (batch) or the features (layer),
//! and the same arithmetic serves both. A folded ReLU is burn's `relu` of the output, and
//! backward burn's `relu_backward` of `dy` against the output recomputed from `x`.

use super::{KernelCtx, dims, generated, ins, staged_reduce};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::ops::{ActivationOps, FloatTensorOps};
use burn::tensor::Shape as BurnShape;
use engine_graph::ops::ElementOp::{Add, Mul, Square, Sub};
use engine_graph::ops::Operand::{Input as I, Temp as Tm};
use engine_graph::ops::{FusedNormalization, FusedNormalizationGrad, Instr, Normalization};

fn axis(kind: Normalization) -> usize {
    match kind {
        Normalization::Batch => 0,
        Normalization::Layer => 1,
    }
}

fn matrix(t: T, c: usize) -> T {
    let n: usize = dims(&t).iter().product();
    B::float_reshape(t, BurnShape::new([n / c.max(1), c]))
}

fn shaped(t: T, shape: &[usize]) -> T {
    B::float_reshape(t, BurnShape::from(shape.to_vec()))
}

/// `1 / sqrt(var + epsilon)`.
fn rstd(var: T, epsilon: f32) -> T {
    B::float_recip(B::float_sqrt(B::float_add_scalar(var, f64::from(epsilon).into())))
}

fn features(x: &T, ctx: &KernelCtx<'_>) -> Result<usize> {
    match dims(x).last() {
        Some(&c) if c > 0 => Ok(c),
        _ => Err(ctx.err("the input has no features")),
    }
}

pub(super) fn forward(op: &FusedNormalization, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let mut it = inputs.into_iter().map(|v| ctx.float(v));
    let x = it.next().ok_or_else(|| ctx.err("missing input"))??;
    let gamma = if op.scale { it.next().transpose()? } else { None };
    let beta = if op.center { it.next().transpose()? } else { None };
    let (shape, c) = (dims(&x), features(&x, ctx)?);
    let a = axis(op.kind);
    let x = matrix(x, c);
    let mean = staged_reduce::mean_dim(x.clone(), a);
    let stats = ctx.out_shape(1)?;
    let (gamma, beta) = (gamma.map(|g| matrix(g, c)), beta.map(|b| matrix(b, c)));
    let [y, var] = forward_generated(op, &x, &mean, gamma.as_ref(), beta.as_ref())
        .unwrap_or_else(|| forward_ops(op, x, &mean, gamma, beta));
    let y = if op.relu { B::relu(y) } else { y };
    Ok([shaped(y, &shape), shaped(mean, &stats), shaped(var, &stats)].into_iter().map(Value::Float).collect())
}

/// The forward's `[y, var]` from burn's ops (`gamma` and `beta` as `[1, c]`).
fn forward_ops(op: &FusedNormalization, x: T, mean: &T, gamma: Option<T>, beta: Option<T>) -> [T; 2] {
    let centered = B::float_sub(x, mean.clone());
    let var = staged_reduce::mean_dim(B::float_mul(centered.clone(), centered.clone()), axis(op.kind));
    let y = affine_ops(centered, &rstd(var.clone(), op.epsilon), gamma.as_ref(), beta.as_ref());
    [y, var]
}

/// `(x - mean) · r [· γ] [+ β]` from burn's ops, given `x - mean`.
fn affine_ops(centered: T, r: &T, gamma: Option<&T>, beta: Option<&T>) -> T {
    let mut y = B::float_mul(centered, r.clone());
    if let Some(g) = gamma {
        y = B::float_mul(y, g.clone());
    }
    if let Some(b) = beta {
        y = B::float_add(y, b.clone());
    }
    y
}

/// With `xhat = (x - mean) * rstd` and `h = dy * gamma`, along the statistics' axis:
/// `dx = rstd * (h - mean(h) - xhat * mean(h * xhat))`; `dgamma = Σ dy xhat` and
/// `dbeta = Σ dy` over the rows.
///
/// For batch normalization `gamma` is constant along the rows, so `mean(h)` and
/// `mean(h * xhat)` are `gamma · dbeta / rows` and `gamma · dgamma / rows`: two reductions
/// over the whole input instead of four, and `dx = (dy − (dbeta + xhat · dgamma) / rows) ·
/// rstd · gamma` with the per-feature factors formed on `[1, c]`. Reductions were a quarter
/// of a ResNet step's kernel time on an H200, batch normalization's gradient the largest.
pub(super) fn backward(op: &FusedNormalizationGrad, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let mut it = inputs.into_iter().map(|v| ctx.float(v));
    let (Some(dy), Some(x)) = (it.next(), it.next()) else { return Err(ctx.err("missing input")) };
    let (dy, x) = (dy?, x?);
    let gamma = if op.scale { it.next().transpose()? } else { None };
    let (Some(mean), Some(var)) = (it.next(), it.next()) else { return Err(ctx.err("missing statistics")) };
    let beta = if op.relu && op.center { it.next().transpose()? } else { None };
    let (shape, c) = (dims(&x), features(&x, ctx)?);
    let a = axis(op.kind);
    let (dy, x) = (matrix(dy, c), matrix(x, c));
    let stats = |t: T| if a == 0 { matrix(t, c) } else { B::float_reshape(t, BurnShape::new([dims(&x)[0], 1])) };
    let (mean, r) = (stats(mean?), stats(rstd(var?, op.epsilon)));
    let gamma = gamma.map(|g| matrix(g, c));
    let dy = if op.relu {
        // The forward's output before its ReLU, computed as the forward computed it.
        let beta = beta.map(|b| matrix(b, c));
        let y = affine_generated(&x, &mean, &r, gamma.as_ref(), beta.as_ref())
            .unwrap_or_else(|| affine_ops(B::float_sub(x.clone(), mean.clone()), &r, gamma.as_ref(), beta.as_ref()));
        B::relu_backward(y, dy)
    } else {
        dy
    };
    let [dx, dgamma, dbeta] = backward_generated(a, &dy, &x, gamma.as_ref(), &mean, &r)
        .unwrap_or_else(|| backward_ops(a, dy, x, gamma, mean, r));
    Ok([shaped(dx, &shape), shaped(dgamma, &[c]), shaped(dbeta, &[c])].into_iter().map(Value::Float).collect())
}

/// The backward's `[dx, dγ, dβ]` from burn's ops (`gamma` as `[1, c]`, `mean` and `r` as
/// the statistics' rows or columns).
fn backward_ops(a: usize, dy: T, x: T, gamma: Option<T>, mean: T, r: T) -> [T; 3] {
    let xhat = B::float_mul(B::float_sub(x.clone(), mean), r.clone());
    let dgamma = staged_reduce::sum_dim(B::float_mul(dy.clone(), xhat.clone()), 0);
    let dbeta = staged_reduce::sum_dim(dy.clone(), 0);
    let dx = if a == 0 {
        let rows = (dims(&x)[0] as f64).max(1.0);
        let scale = match gamma {
            Some(g) => B::float_mul(r, g),
            None => r,
        };
        let m1 = B::float_div_scalar(dbeta.clone(), rows.into());
        let m2 = B::float_div_scalar(dgamma.clone(), rows.into());
        let inner = B::float_sub(B::float_sub(dy, m1), B::float_mul(xhat, m2));
        B::float_mul(inner, scale)
    } else {
        let h = match gamma {
            Some(g) => B::float_mul(dy, g),
            None => dy,
        };
        let mh = staged_reduce::mean_dim(h.clone(), a);
        let mhx = staged_reduce::mean_dim(B::float_mul(h.clone(), xhat.clone()), a);
        let inner = B::float_sub(B::float_sub(h, mh), B::float_mul(xhat, mhx));
        B::float_mul(inner, r)
    };
    [dx, dgamma, dbeta]
}

/// `x̂ · a` with `x̂ = (x − mean) · rstd`, over `[a, x, mean, rstd]`.
fn xhat_times() -> Vec<Instr> {
    vec![ins(Sub, I(1), I(2)), ins(Mul, Tm(0), I(3)), ins(Mul, I(0), Tm(1))]
}

/// The forward's `[y, var]` from generated kernels on a cubecl device: the statistics
/// are rows of the features (batch) or one value per row (layer), which the generated
/// kernel reads as such, so `(x − mean)²` and `(x − mean) · rstd · γ + β` are one pass
/// over the input each, where burn's ops take two and three and store the centered input.
/// Each value is computed in the order burn's ops compute it, so the two agree to the
/// bit. `None` where a kernel does not apply (then burn's ops run it all).
fn forward_generated(op: &FusedNormalization, x: &T, mean: &T, gamma: Option<&T>, beta: Option<&T>) -> Option<[T; 2]> {
    let (shape, a) = (dims(x), axis(op.kind));
    let sq = generated(|| vec![ins(Sub, I(0), I(1)), ins(Square, Tm(0), Tm(0))], &[x, mean], &shape)?;
    let var = staged_reduce::mean_dim(sq, a);
    let y = affine_generated(x, mean, &rstd(var.clone(), op.epsilon), gamma, beta)?;
    Some([y, var])
}

/// `(x - mean) · r [· γ] [+ β]` as one generated pass. rstd and γ stay two factors, as
/// burn's ops apply them, so the two paths agree to the bit and `ENGINE_ELEMENTWISE=ops`
/// changes only the speed.
fn affine_generated(x: &T, mean: &T, r: &T, gamma: Option<&T>, beta: Option<&T>) -> Option<T> {
    let mut inputs = vec![x, mean];
    let mut code = vec![ins(Sub, I(0), I(1))];
    for f in std::iter::once(r).chain(gamma) {
        inputs.push(f);
        code.push(ins(Mul, Tm(code.len() - 1), I(inputs.len() - 1)));
    }
    if let Some(b) = beta {
        inputs.push(b);
        code.push(ins(Add, Tm(code.len() - 1), I(inputs.len() - 1)));
    }
    generated(|| code, &inputs, &dims(x))
}

/// The backward's `[dx, dγ, dβ]` from generated kernels on a cubecl device (`mean` and
/// `r`, the rstd, shaped as rows or columns of the input as for [`forward_generated`]),
/// in burn's ops' order. `dγ = Σ dy · x̂` comes from one pass. Batch normalization then
/// takes one more: `dx = (dy − m1 − x̂ · m2) · scale` with the rows `m1 = Σdy / rows`,
/// `m2 = dγ / rows` and `scale = rstd · γ` (seven passes by burn's ops). Layer
/// normalization, with `h = dy · γ`, takes `h` and `h · x̂` for their row means, then
/// `dx = (h − mean(h) − x̂ · mean(h · x̂)) · rstd`: four where burn's ops take nine.
fn backward_generated(a: usize, dy: &T, x: &T, gamma: Option<&T>, mean: &T, r: &T) -> Option<[T; 3]> {
    let shape = dims(x);
    let p = generated(xhat_times, &[dy, x, mean, r], &shape)?;
    let dgamma = staged_reduce::sum_dim(p.clone(), 0);
    let dbeta = staged_reduce::sum_dim(dy.clone(), 0);
    let dx = if a == 0 {
        let rows = (shape[0] as f64).max(1.0);
        let m1 = B::float_div_scalar(dbeta.clone(), rows.into());
        let m2 = B::float_div_scalar(dgamma.clone(), rows.into());
        let scale = match gamma {
            Some(g) => B::float_mul(r.clone(), g.clone()),
            None => r.clone(),
        };
        let code = || {
            vec![
                ins(Sub, I(1), I(2)),
                ins(Mul, Tm(0), I(3)),
                ins(Sub, I(0), I(4)),
                ins(Mul, Tm(1), I(5)),
                ins(Sub, Tm(2), Tm(3)),
                ins(Mul, Tm(4), I(6)),
            ]
        };
        generated(code, &[dy, x, mean, r, &m1, &m2, &scale], &shape)?
    } else {
        let h = match gamma {
            Some(g) => generated(|| vec![ins(Mul, I(0), I(1))], &[dy, g], &shape)?,
            None => dy.clone(),
        };
        let hx = match gamma {
            Some(_) => generated(xhat_times, &[&h, x, mean, r], &shape)?,
            None => p,
        };
        let (mh, mhx) = (staged_reduce::mean_dim(h.clone(), 1), staged_reduce::mean_dim(hx, 1));
        let code = || {
            vec![
                ins(Sub, I(1), I(2)),
                ins(Mul, Tm(0), I(3)),
                ins(Mul, Tm(1), I(5)),
                ins(Sub, I(0), I(4)),
                ins(Sub, Tm(3), Tm(2)),
                ins(Mul, Tm(4), I(3)),
            ]
        };
        generated(code, &[&h, x, mean, r, &mh, &mhx], &shape)?
    };
    Some([dx, dgamma, dbeta])
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
mod tests {
    use super::*;
    use crate::Precision;
    use crate::value::{float_from_f64, float_values};

    /// To the bit on `wgpu`; within 1e-6 elsewhere, since NVRTC may contract a multiply
    /// and an add of the generated kernel into one FMA where burn's kernels round between.
    fn close(what: &str, got: T, want: T) {
        let (got, want) = (float_values(got), float_values(want));
        assert_eq!(got.len(), want.len(), "{what}");
        let exact = what.starts_with("wgpu");
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            let ok = if exact { a.to_bits() == b.to_bits() } else { (a - b).abs() <= 1e-6 * (1.0 + b.abs()) };
            assert!(ok, "{what}: [{i}] {a} against {b}");
        }
    }

    /// On every test device, batch and layer normalization's generated passes equal
    /// burn's ops (see `close`), forward and backward, with and without γ and β, over rows
    /// of 8, 6 and 5 features (four, two and one to a thread).
    #[test]
    fn generated_passes_equal_the_ops() {
        for (name, device) in crate::device::test_devices() {
            let on = |d: Vec<f64>, shape: &[usize]| float_from_f64(shape, d, &device, Precision::F32);
            for (kind, a) in [(Normalization::Batch, 0), (Normalization::Layer, 1)] {
                for c in [8, 6, 5] {
                    let rows = 36;
                    let x = on((0..rows * c).map(|i| ((i * 29 % 83) as f64 - 41.0) / 8.0).collect(), &[rows, c]);
                    let dy = on((0..rows * c).map(|i| ((i * 31 % 79) as f64 - 39.0) / 16.0).collect(), &[rows, c]);
                    let g = on((0..c).map(|i| 0.5 + i as f64 * 0.25).collect(), &[1, c]);
                    let b = on((0..c).map(|i| i as f64 * 0.5 - 1.0).collect(), &[1, c]);
                    for (scale, center) in [(true, true), (false, false), (true, false), (false, true)] {
                        let case = format!("{name}, {kind:?}, {c} features, scale {scale}, center {center}");
                        let op = FusedNormalization { kind, epsilon: 1e-3, scale, center, relu: false };
                        let (g, b) = (scale.then(|| g.clone()), center.then(|| b.clone()));
                        let mean = staged_reduce::mean_dim(x.clone(), a);
                        let [y, var] = forward_generated(&op, &x, &mean, g.as_ref(), b.as_ref())
                            .unwrap_or_else(|| panic!("{case}: not generated"));
                        let [y_ops, var_ops] = forward_ops(&op, x.clone(), &mean, g.clone(), b.clone());
                        close(&format!("{case}: var"), var.clone(), var_ops);
                        close(&format!("{case}: y"), y, y_ops);
                        let r = rstd(var, op.epsilon);
                        let got = backward_generated(a, &dy, &x, g.as_ref(), &mean, &r)
                            .unwrap_or_else(|| panic!("{case}: backward not generated"));
                        let want = backward_ops(a, dy.clone(), x.clone(), g, mean, r);
                        for ((what, got), want) in ["dx", "dgamma", "dbeta"].iter().zip(got).zip(want) {
                            close(&format!("{case}: {what}"), got, want);
                        }
                    }
                }
            }
        }
    }
}
