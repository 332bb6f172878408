//! Softmax, log-softmax and the sparse softmax cross entropy over the last axis, one row
//! at a time in cache. burn's generic versions make a broadcast tensor per step (max,
//! shifted, exp, sum, quotient): 54 µs for the MLP's 128 × 10 logits, against a few
//! microseconds for one pass per row here.

use super::buffer::{Elem, as_f32, as_f32_mut, ints, tensor, view};
use super::vmath;
use crate::{
    Result, Value,
    kernels::{KernelCtx, dims},
    value::T,
};

/// The rows of a tensor whose last axis is `axis`; None for another axis (burn's kernel
/// serves those).
fn rows_of(t: &T, axis: usize) -> Option<usize> {
    let shape = dims(t);
    let last = shape.len().checked_sub(1)?;
    (axis == last && shape[last] > 0).then_some(shape[last])
}

/// `(max, log Σ exp(x - max))` of one row.
fn shift_and_log_sum<E: Elem>(row: &[E]) -> (E, E) {
    let max = row.iter().copied().fold(E::neg_infinity(), E::max);
    let sum: E = row.iter().map(|&v| (v - max).exp()).sum();
    (max, sum.ln())
}

/// `softmax` (or with `log`, `log_softmax`) along the last axis; `Err(inputs)` for
/// another axis.
pub(super) fn softmax<E: Elem>(
    axis: usize,
    log: bool,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> std::result::Result<Result<T>, Vec<Value>> {
    let x = match <[Value; 1]>::try_from(inputs) {
        Ok([Value::Float(x)]) => x,
        Ok(other) => return Err(other.into()),
        Err(inputs) => return Err(inputs),
    };
    let Some(classes) = rows_of(&x, axis) else { return Err(vec![Value::Float(x)]) };
    let xs = view::<E>(&x);
    let mut out = vec![E::zero(); xs.len()];
    for (row, o) in xs.chunks_exact(classes).zip(out.chunks_exact_mut(classes)) {
        if log {
            let (max, lse) = shift_and_log_sum(row);
            o.iter_mut().zip(row).for_each(|(o, &v)| *o = v - max - lse);
        } else {
            softmax_row(row, o);
        }
    }
    Ok(Ok(tensor(out, &dims(&x), ctx.device)))
}

/// One row's softmax into `o`: each exponential once (they are most of the time), then
/// divided by their sum; in f32 the vectorized exp of `vmath`, libm's one at a time
/// otherwise.
pub(super) fn softmax_row<E: Elem>(row: &[E], o: &mut [E]) {
    let max = row.iter().copied().fold(E::neg_infinity(), E::max);
    let total = match (as_f32(row), num_traits::ToPrimitive::to_f32(&max)) {
        (Some(r), Some(m)) => {
            as_f32_mut(o).map(|o| vmath::exp_shifted(o, r, m)).and_then(|t| <E as num_traits::NumCast>::from(t))
        }
        _ => None,
    };
    let total = total.unwrap_or_else(|| {
        o.iter_mut().zip(row).for_each(|(o, &v)| *o = (v - max).exp());
        o.iter().copied().sum()
    });
    o.iter_mut().for_each(|e| *e = *e / total);
}

/// `-log softmax(logits)[label]` per row, with the logits' last axis as the classes. A
/// label outside `[0, classes)` is an error naming the node (burn's one-hot would make it
/// a loss of zero).
pub(super) fn sparse_cross_entropy<E: Elem>(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let mut it = inputs.into_iter();
    let (Some(Value::Float(logits)), Some(Value::Int(labels))) = (it.next(), it.next()) else {
        return Err(ctx.err("expected float logits and integer labels"));
    };
    let shape = dims(&logits);
    let classes = shape.last().copied().unwrap_or(0);
    let (xs, ls) = (view::<E>(&logits), ints(&labels));
    if classes == 0 || xs.len() != ls.len() * classes {
        return Err(ctx.err(format!("{} labels for logits of shape {shape:?}", ls.len())));
    }
    let mut out = Vec::with_capacity(ls.len());
    for (row, &label) in xs.chunks_exact(classes).zip(ls.iter()) {
        let Some(&at) = usize::try_from(label).ok().and_then(|l| row.get(l)) else {
            return Err(ctx.err(format!("label {label} is outside the {classes} classes [0, {classes})")));
        };
        let (max, lse) = shift_and_log_sum(row);
        out.push(max + lse - at);
    }
    Ok(tensor(out, &shape[..shape.len() - 1], ctx.device))
}
