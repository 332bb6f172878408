//! `Transfer`: a value crossing from one partition's device to another's.
//!
//! Partitions on one device (central_storage's host and CPU replicas) hand the value over
//! as is. Across devices (variables on the host, replicas on a GPU) the value is copied
//! onto this partition's device here, once per transfer: every kernel after it then sees
//! only its own backend's tensors (burn's dispatch refuses to mix them in one op).

use super::KernelCtx;
use crate::{Result, Value, value::B};
use burn::backend::TensorMetadata;
use burn::backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};

pub(super) fn run(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    Ok(inputs.into_iter().map(|v| to_device(v, ctx)).collect())
}

fn to_device(v: Value, ctx: &KernelCtx<'_>) -> Value {
    // Leaving a queued device is a read back through the host (counted); arriving on one
    // from the CPU is an upload.
    let here = |t: &crate::value::T| {
        let same = t.device() == *ctx.device;
        if !same {
            crate::device::count_read(t);
        }
        same
    };
    match v {
        Value::Float(t) if !here(&t) => Value::Float(B::float_to_device(t, ctx.device)),
        Value::Int(t) if !here(&t) => Value::Int(B::int_to_device(t, ctx.device)),
        Value::Bool(t) if !here(&t) => Value::Bool(B::bool_to_device(t, ctx.device)),
        v => v,
    }
}
