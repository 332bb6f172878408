//! The all-reduce kernel: packs a bucket's tensors into one buffer, reduces it with the
//! executor's collective, and unpacks the result. On a device the bucket is packed and
//! unpacked there, so a bucket costs one download and one upload, not one per tensor
//! (each download is a synchronization).

use super::KernelCtx;
use crate::{Precision, Result, Value, value::B};
use burn::backend::DispatchDevice;
use burn::backend::ops::FloatTensorOps;
use burn::tensor::{Shape as BurnShape, Slice};
use engine_graph::ops::AllReduce;

/// A testing aid, armed only by this variable: `ENGINE_FAULT_IN_ALL_REDUCE=STEP` makes the
/// process exit (status 86, as the estimator's injected faults) inside the first all-reduce
/// of global step STEP, after its peers have entered it and wait for its part: a worker
/// lost in the middle of a collective, at a step a test can name.
pub const FAULT_IN_ALL_REDUCE_ENV: &str = "ENGINE_FAULT_IN_ALL_REDUCE";

fn fault_due(step: i64) -> bool {
    static AT: std::sync::OnceLock<Option<i64>> = std::sync::OnceLock::new();
    *AT.get_or_init(|| std::env::var(FAULT_IN_ALL_REDUCE_ENV).ok().and_then(|v| v.trim().parse().ok())) == Some(step)
}

pub(crate) fn all_reduce(a: &AllReduce, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let Some(group) = ctx.collective else {
        // A single replica: the reduction of one value is itself.
        return Ok(inputs);
    };
    if group.size() > 1 && fault_due(ctx.step) {
        log::error!("{FAULT_IN_ALL_REDUCE_ENV}: exiting inside the all-reduce of step {} (injected fault)", ctx.step);
        // Long enough for every peer to be waiting in this all-reduce.
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::process::exit(86);
    }
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|v| v.shape()).collect();
    let total = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    if inputs.iter().any(|v| !matches!(v, Value::Float(_))) {
        return Err(ctx.err("all-reduce of a non-float tensor"));
    }
    if !matches!(ctx.device, DispatchDevice::Flex(_)) && total > 0 {
        return packed_on_device(a, group, inputs, &shapes, total, ctx);
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
        Precision::F32 | Precision::Bf16Mixed => {
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

fn packed_on_device(
    a: &AllReduce,
    group: &dyn crate::Collective,
    inputs: Vec<Value>,
    shapes: &[Vec<usize>],
    total: usize,
    ctx: &KernelCtx<'_>,
) -> Result<Vec<Value>> {
    let flat = inputs
        .into_iter()
        .zip(shapes)
        .map(|(v, s)| Ok(B::float_reshape(ctx.float(v)?, BurnShape::new([s.iter().product::<usize>()]))))
        .collect::<Result<Vec<_>>>()?;
    let packed = Value::Float(B::float_cat(flat, 0));
    let reduced = match ctx.precision {
        Precision::F32 | Precision::Bf16Mixed => {
            let mut host = packed.to_f32_vec()?;
            drop(packed);
            group.all_reduce(&mut host, a.reduce)?;
            Value::from_f32(&[total], host, ctx.device)
        }
        Precision::F64 => {
            let mut host = packed.to_f64_vec()?;
            drop(packed);
            group.all_reduce_f64(&mut host, a.reduce)?;
            Value::from_f64(&[total], host, ctx.device, ctx.precision)
        }
    };
    let reduced = ctx.float(reduced)?;
    let mut at = 0;
    Ok(shapes
        .iter()
        .map(|shape| {
            let n: usize = shape.iter().product();
            let part = B::float_slice(reduced.clone(), &[Slice::new(at as isize, Some((at + n) as isize), 1)]);
            at += n;
            Value::Float(B::float_reshape(part, BurnShape::from(shape.clone())))
        })
        .collect())
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
