//! `Gather` and its gradient `ScatterAddRows` (embedding lookups), on burn's index
//! selection. Indices are checked on the host first: an index outside the table is an
//! error naming the node and the index, never a read or write past a buffer (burn's
//! kernels would panic or wrap).

use super::KernelCtx;
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::ops::{FloatTensorOps, IntTensorOps};
use burn::backend::tensor::IndexingUpdateOp;
use burn::tensor::Shape as BurnShape;

/// The indices on the host, each checked against `rows`: an index outside the table is an
/// error naming the node, never a read or write past the buffer.
pub(super) fn host_indices(v: &Value, rows: usize, ctx: &KernelCtx<'_>) -> Result<Vec<usize>> {
    let host = v.to_host()?;
    let Some(ids) = host.as_i64() else { return Err(ctx.err("indices must be integers")) };
    ids.iter()
        .map(|&i| {
            usize::try_from(i)
                .ok()
                .filter(|&i| i < rows)
                .ok_or_else(|| ctx.err(format!("index {i} is outside the table's {rows} rows")))
        })
        .collect()
}

/// The indices as a flat int tensor, after checking every one against `rows`.
fn checked_indices(v: Value, rows: usize, ctx: &KernelCtx<'_>) -> Result<(T, usize)> {
    let n = host_indices(&v, rows, ctx)?.len();
    let Value::Int(t) = v else { return Err(ctx.err("indices must be integers")) };
    Ok((B::int_reshape(t, BurnShape::new([n])), n))
}

pub(super) fn gather(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    let mut it = inputs.into_iter();
    let (Some(params), Some(indices)) = (it.next(), it.next()) else { return Err(ctx.err("needs params and indices")) };
    let rows = params.shape().first().copied().unwrap_or(0);
    let params = ctx.float(params)?;
    let (idx, _) = checked_indices(indices, rows, ctx)?;
    let picked = B::float_select(params, 0, idx);
    Ok(Value::Float(B::float_reshape(picked, BurnShape::from(ctx.out_shape(0)?))))
}

pub(super) fn scatter_add_rows(rows: usize, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    let mut it = inputs.into_iter();
    let (Some(indices), Some(updates)) = (it.next(), it.next()) else {
        return Err(ctx.err("needs indices and updates"));
    };
    let (idx, n) = checked_indices(indices, rows, ctx)?;
    let updates = ctx.float(updates)?;
    let out = ctx.out_shape(0)?;
    let mut flat = vec![n];
    flat.extend_from_slice(&out[1..]);
    let updates = B::float_reshape(updates, BurnShape::from(flat));
    let zeros = B::float_zeros(BurnShape::from(out), ctx.device, ctx.precision.dtype());
    Ok(Value::Float(B::float_select_assign(zeros, 0, idx, updates, IndexingUpdateOp::Add)))
}
