//! Accuracy: state `[correct, count]`.

use super::{flat, sum_and_count};
use engine_graph::{DType, GraphBuilder, Outlet, Result};

pub(super) fn build(b: &mut GraphBuilder<'_>, labels: Outlet, predictions: Outlet) -> Result<Vec<Outlet>> {
    let labels = flat(b, labels)?;
    let predictions = flat(b, predictions)?;
    let dtype = b.fact(labels)?.dtype;
    let predictions = b.cast(predictions, dtype)?;
    let hit = b.equal(labels, predictions)?;
    let hit = b.cast(hit, DType::F32)?;
    sum_and_count(b, hit)
}
