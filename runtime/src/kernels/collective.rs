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
    let mut packed: Vec<f64> = Vec::with_capacity(shapes.iter().map(|s| s.iter().product::<usize>()).sum());
    for v in &inputs {
        if !matches!(v, Value::Float(_)) {
            return Err(ctx.err("all-reduce of a non-float tensor"));
        }
        packed.extend(v.to_f64_vec()?);
    }
    drop(inputs);
    match ctx.precision {
        Precision::F64 => group.all_reduce_f64(&mut packed, a.reduce)?,
        Precision::F32 => {
            let mut narrow: Vec<f32> = packed.iter().map(|&x| x as f32).collect();
            group.all_reduce(&mut narrow, a.reduce)?;
            packed = narrow.into_iter().map(f64::from).collect();
        }
    }
    let mut at = 0;
    let mut out = Vec::with_capacity(shapes.len());
    for shape in shapes {
        let n: usize = shape.iter().product();
        out.push(Value::from_f64(&shape, packed[at..at + n].to_vec(), ctx.device, ctx.precision));
        at += n;
    }
    Ok(out)
}
