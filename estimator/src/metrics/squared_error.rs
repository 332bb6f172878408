//! Mean squared error: state `[sum of squared errors, count]`.

use super::{flat, sum_and_count};
use engine_graph::{DType, GraphBuilder, Outlet, Result};

pub(super) fn build(b: &mut GraphBuilder<'_>, labels: Outlet, predictions: Outlet) -> Result<Vec<Outlet>> {
    let labels = flat(b, labels)?;
    let labels = b.cast(labels, DType::F32)?;
    let predictions = flat(b, predictions)?;
    let d = b.sub(predictions, labels)?;
    let sq = b.square(d)?;
    sum_and_count(b, sq)
}
