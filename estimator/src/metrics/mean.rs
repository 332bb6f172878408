//! Mean: state `[sum, count]`.

use super::{flat, sum_and_count};
use engine_graph::{DType, GraphBuilder, Outlet, Result};

pub(super) fn build(b: &mut GraphBuilder<'_>, values: Outlet) -> Result<Vec<Outlet>> {
    let values = flat(b, values)?;
    let values = b.cast(values, DType::F32)?;
    sum_and_count(b, values)
}
