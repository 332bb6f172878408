//! The all-reduce kernel: packs a bucket's tensors into one buffer, reduces it with the
//! executor's collective, and unpacks the result.

use super::KernelCtx;
use crate::{Precision, Result, Value};
use engine_graph::ops::AllReduce;

pub(crate) fn all_reduce(a: &AllReduce, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let Some(group) = ctx.collective else {
        // A single replica: the reduction of one value is itself.
        return Ok(inputs);
    };
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|v| v.shape()).collect();
    let total = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    if inputs.iter().any(|v| !matches!(v, Value::Float(_))) {
        return Err(ctx.err("all-reduce of a non-float tensor"));
    }
    // f32 training packs and unpacks in f32: a detour through f64 cost more than the
    // shared-memory all-reduce of the CNN's gradients itself.
    match ctx.precision {
        Precision::F64 => {
            let mut packed: Vec<f64> = Vec::with_capacity(total);
            for v in &inputs {
                packed.extend(v.to_f64_vec()?);
            }
            drop(inputs);
            group.all_reduce_f64(&mut packed, a.reduce)?;
            Ok(unpack(&shapes, &packed, |shape, part| Value::from_f64(shape, part.to_vec(), ctx.device, ctx.precision)))
        }
        Precision::F32 => {
            let mut packed: Vec<f32> = Vec::with_capacity(total);
            for v in &inputs {
                packed.extend(v.to_f32_vec()?);
            }
            drop(inputs);
            group.all_reduce(&mut packed, a.reduce)?;
            Ok(unpack(&shapes, &packed, |shape, part| Value::from_f32(shape, part.to_vec(), ctx.device)))
        }
    }
}

/// Cuts the reduced buffer back into the bucket's tensors.
fn unpack<E>(shapes: &[Vec<usize>], packed: &[E], value: impl Fn(&[usize], &[E]) -> Value) -> Vec<Value> {
    let mut at = 0;
    shapes
        .iter()
        .map(|shape| {
            let n: usize = shape.iter().product();
            let out = value(shape, &packed[at..at + n]);
            at += n;
            out
        })
        .collect()
}
