//! Dropout on the CPU: the mask drawn straight into its buffer and the input scaled in the
//! same pass, instead of a host mask converted, uploaded and multiplied (which took seven
//! nanoseconds per unit on the MLP spec, as much as its second dense layer).

use super::{
    buffer::{Elem, tensor, view},
    simd::multiversion,
};
use crate::{
    Result, Value,
    kernels::{
        KernelCtx, dims,
        dropout::{Stream, kept, scale},
    },
};
use engine_graph::ops::Dropout;

/// `(x * mask, mask)`, the same bits as the generic kernel's.
pub(super) fn run<E: Elem>(d: &Dropout, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [x] = ctx.floats(inputs)?;
    let shape = dims(&x);
    let xs = view::<E>(&x);
    let lanes = Stream::lanes(d, xs.len(), ctx);
    let scale = scale::<E>(d, ctx)?;
    let (mut out, mut mask) = (vec![E::zero(); xs.len()], vec![E::zero(); xs.len()]);
    apply(&xs, lanes, scale, &mut out, &mut mask);
    Ok(vec![Value::Float(tensor(out, &shape, ctx.device)), Value::Float(tensor(mask, &shape, ctx.device))])
}

multiversion! {
    /// Mask and output in one vectorized pass. Dropped units are multiplied too: a NaN or
    /// infinity stays visible, as unfused.
    fn apply<E: Elem>(xs: &[E], lanes: (u32, u32, Option<u32>), scale: E, out: &mut [E], mask: &mut [E]) {
        for (i, ((o, m), x)) in out.iter_mut().zip(mask.iter_mut()).zip(xs).enumerate() {
            *m = if kept(i as u32, lanes) { scale } else { E::zero() };
            *o = *x * *m;
        }
    }
}
