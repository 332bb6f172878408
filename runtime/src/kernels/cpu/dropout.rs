//! Dropout on the CPU: the mask drawn straight into its buffer and the input scaled in the
//! same pass, instead of a host mask converted, uploaded and multiplied (which took seven
//! nanoseconds per unit on the MLP spec, as much as its second dense layer).

use super::buffer::{Elem, tensor, view};
use crate::{
    Result, Value,
    kernels::{KernelCtx, dims, dropout::draw},
};
use engine_graph::ops::Dropout;

/// `(x * mask, mask)`, the same bits as the generic kernel's.
pub(super) fn run<E: Elem>(d: &Dropout, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [x] = ctx.floats(inputs)?;
    let shape = dims(&x);
    let xs = view::<E>(&x);
    let n = xs.len();
    let mut kept = vec![false; n];
    let scale = draw(d, n, ctx, |i, k| kept[i] = k);
    // The f32 mask holds the f64 scale rounded once, as the generic kernel's does.
    let scale = E::from(scale).ok_or_else(|| ctx.err("dropout scale out of range"))?;
    let mask: Vec<E> = kept.iter().map(|&k| if k { scale } else { E::zero() }).collect();
    // Dropped units are multiplied too: a NaN or infinity stays visible, as unfused.
    let out: Vec<E> = xs.iter().zip(&mask).map(|(x, m)| *x * *m).collect();
    Ok(vec![Value::Float(tensor(out, &shape, ctx.device)), Value::Float(tensor(mask, &shape, ctx.device))])
}
