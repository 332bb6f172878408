//! Dropout on the CPU: the mask drawn straight into its buffer and the input scaled in the
//! same pass, instead of a host mask converted, uploaded and multiplied (which took seven
//! nanoseconds per unit on the MLP spec, as much as its second dense layer).

use super::buffer::{Elem, tensor, view};
use crate::{
    Result, Value,
    kernels::{KernelCtx, dims, dropout::mask},
};
use engine_graph::ops::Dropout;

/// `(x * mask, mask)`, the same bits as the generic kernel's.
pub(super) fn run<E: Elem>(d: &Dropout, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [x] = ctx.floats(inputs)?;
    let shape = dims(&x);
    let xs = view::<E>(&x);
    let mask = mask::<E>(d, xs.len(), ctx)?;
    // Dropped units are multiplied too: a NaN or infinity stays visible, as unfused.
    let out: Vec<E> = xs.iter().zip(&mask).map(|(x, m)| *x * *m).collect();
    Ok(vec![Value::Float(tensor(out, &shape, ctx.device)), Value::Float(tensor(mask, &shape, ctx.device))])
}
