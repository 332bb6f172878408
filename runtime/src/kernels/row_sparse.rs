//! Row-sparse gradients (embedding tables): the mask of looked-up rows, and their
//! reduction across replicas by exchanging only those rows.
//!
//! Both work on the host: the indices are read there anyway (to check them against the
//! table), and the rows of one batch are few next to the table.

use super::{KernelCtx, gather::host_indices};
use crate::{Collective, Result, Value};
use engine_graph::{HostData, HostTensor, ops::AllGatherRows, ops::ReduceOp};

fn mask(rows: usize, touched: &[usize], ctx: &KernelCtx<'_>) -> Result<Value> {
    let mut m = vec![false; rows];
    for &i in touched {
        m[i] = true;
    }
    let t = HostTensor::new(ctx.out_shape(ctx.node.outputs.len() - 1)?, HostData::Bool(m))
        .map_err(|e| ctx.err(e.to_string()))?;
    Ok(Value::from_host(&t, ctx.device, ctx.precision))
}

pub(super) fn rows_touched(rows: usize, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    let indices = inputs.first().ok_or_else(|| ctx.err("needs indices"))?;
    mask(rows, &host_indices(indices, rows, ctx)?, ctx)
}

pub(crate) fn all_gather_rows(a: &AllGatherRows, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [indices, updates] = <[Value; 2]>::try_from(inputs).map_err(|_| ctx.err("needs indices and updates"))?;
    let ids = host_indices(&indices, a.rows, ctx)?;
    let shape = ctx.out_shape(0)?;
    let row: usize = shape[1..].iter().product();
    let values = updates.to_f64_vec()?;
    if values.len() != ids.len() * row {
        return Err(ctx.err(format!("{} updates for {} indices of rows of {row}", values.len(), ids.len())));
    }
    let (ids, values, replicas) = match ctx.collective {
        Some(group) if group.size() > 1 => {
            let (ids, values) = exchange(group, &ids, &values, row, ctx)?;
            (ids, values, group.size())
        }
        _ => (ids, values, 1),
    };
    // Added in the gathered order, the same on every replica, so every replica holds the
    // same bits.
    let mut sum = vec![0.0f64; a.rows * row];
    for (k, &i) in ids.iter().enumerate() {
        for (s, v) in sum[i * row..(i + 1) * row].iter_mut().zip(&values[k * row..(k + 1) * row]) {
            *s += v;
        }
    }
    if a.reduce == ReduceOp::Mean {
        sum.iter_mut().for_each(|s| *s /= replicas as f64);
    }
    let touched = mask(a.rows, &ids, ctx)?;
    Ok(vec![Value::from_f64(&shape, sum, ctx.device, ctx.precision), touched])
}

/// Every replica's `(index, row)` entries, in rank order. An entry travels as 32-bit
/// words (the collectives' element): the index as two, then the row, one word per f32
/// or two per f64, bit for bit, so nothing is rounded on the way.
fn exchange(
    group: &dyn Collective,
    ids: &[usize],
    values: &[f64],
    row: usize,
    ctx: &KernelCtx<'_>,
) -> Result<(Vec<usize>, Vec<f64>)> {
    let wide = ctx.precision.is_f64();
    let stride = 2 + row * if wide { 2 } else { 1 };
    let mut words: Vec<u32> = Vec::with_capacity(ids.len() * stride);
    for (k, &i) in ids.iter().enumerate() {
        let i = i as u64;
        words.extend([i as u32, (i >> 32) as u32]);
        for &v in &values[k * row..(k + 1) * row] {
            if wide {
                let bits = v.to_bits();
                words.extend([bits as u32, (bits >> 32) as u32]);
            } else {
                words.push((v as f32).to_bits());
            }
        }
    }
    let sent: Vec<f32> = words.into_iter().map(f32::from_bits).collect();
    let got = group.all_gather(&sent)?;
    if got.len() % stride != 0 {
        return Err(ctx.err(format!(
            "gathered {} words, not whole entries of {stride}: replicas disagree on the table's row size",
            got.len()
        )));
    }
    let entries = got.len() / stride;
    let (mut all_ids, mut all_values) = (Vec::with_capacity(entries), Vec::with_capacity(entries * row));
    for entry in got.chunks_exact(stride) {
        let word = |j: usize| entry[j].to_bits() as u64;
        all_ids.push(word(0) | (word(1) << 32));
        for j in 0..row {
            all_values.push(if wide {
                f64::from_bits(word(2 + 2 * j) | (word(3 + 2 * j) << 32))
            } else {
                f32::from_bits(entry[2 + j].to_bits()) as f64
            });
        }
    }
    let rows = ctx.out_shape(0)?[0];
    let ids = all_ids
        .into_iter()
        .map(|i| {
            usize::try_from(i)
                .ok()
                .filter(|&i| i < rows)
                .ok_or_else(|| ctx.err(format!("another replica sent row {i}, outside the table's {rows} rows")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((ids, all_values))
}
