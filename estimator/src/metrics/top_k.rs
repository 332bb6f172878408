//! Top-k accuracy (`in_top_k`): state `[hits, count]`. An example hits when fewer than `k`
//! logits are strictly greater than its label's logit.

use super::sum_and_count;
use engine_graph::{DType, Dim, GraphBuilder, GraphError, Outlet, Result};

pub(super) fn build(b: &mut GraphBuilder<'_>, labels: Outlet, logits: Outlet, k: usize) -> Result<Vec<Outlet>> {
    let shape = b.fact(logits)?.shape.clone();
    let classes = match shape.dims().last() {
        Some(Dim::Known(c)) if shape.rank() == 2 => *c,
        _ => return Err(GraphError::invalid("top_k_accuracy", format!("logits must be [N, classes], found {shape}"))),
    };
    let labels = b.cast(labels, DType::I64)?;
    let hot = b.one_hot(labels, classes)?;
    let picked = b.mul(logits, hot)?;
    let target = b.reduce_sum(picked, &[1], true)?;
    let above = b.greater(logits, target)?;
    let above = b.cast(above, DType::F32)?;
    let rank = b.reduce_sum(above, &[1], false)?;
    let kk = b.scalar(k as f32)?;
    let hit = b.less(rank, kk)?;
    let hit = b.cast(hit, DType::F32)?;
    sum_and_count(b, hit)
}
