//! The all-reduce kernel: packs a bucket's tensors into one buffer, reduces it with the
//! executor's collective, and unpacks the result.

use super::KernelCtx;
use crate::{Result, Value};
use engine_graph::{HostTensor, ops::AllReduce};

pub(super) fn all_reduce(a: &AllReduce, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let Some(group) = ctx.collective else {
        // A single replica: the reduction of one value is itself.
        return Ok(inputs);
    };
    let hosts = inputs.iter().map(|v| v.to_host()).collect::<Result<Vec<_>>>()?;
    let mut packed: Vec<f32> = Vec::with_capacity(hosts.iter().map(|h| h.len()).sum());
    for h in &hosts {
        packed.extend_from_slice(h.as_f32().ok_or_else(|| ctx.err("all-reduce of a non-float tensor"))?);
    }
    group.all_reduce(&mut packed, a.reduce)?;
    let mut at = 0;
    let mut out = Vec::with_capacity(hosts.len());
    for h in hosts {
        let n = h.len();
        let t = HostTensor::f32(h.shape.clone(), packed[at..at + n].to_vec())?;
        out.push(Value::from_host(&t, ctx.device, ctx.precision));
        at += n;
    }
    Ok(out)
}
