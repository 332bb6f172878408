//! Concrete shapes from symbolic ones: a fact's `[N, 28, 28]` at a batch, and the batch a
//! concrete tensor was fed at. The executor checks feeds with them, kernels size outputs
//! with them, a ps shard checks pushed values with them: their own module, so none of
//! those borrows from another.

use engine_graph::{Dim, Shape};

/// The batch size under which `shape` resolves to `got`, if one does.
pub(crate) fn batch_of(shape: &Shape, got: &[usize]) -> Option<usize> {
    let (k, n) = shape.dims().iter().zip(got).find_map(|(d, &n)| match d {
        Dim::Batch(k) => Some((*k, n)),
        Dim::Known(_) => None,
    })?;
    let batch = (n % k == 0).then_some(n / k)?;
    (got.len() == shape.rank() && resolve(shape, Some(batch)).as_deref() == Some(got)).then_some(batch)
}

pub(crate) fn resolve(shape: &Shape, batch: Option<usize>) -> Option<Vec<usize>> {
    shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Known(n) => Some(*n),
            Dim::Batch(k) => batch.map(|b| b * k),
        })
        .collect()
}
