//! Precision and recall: state `[true positives, false positives, false negatives]`.

use super::{as_indicator, ratio};
use engine_graph::{GraphBuilder, Outlet, Result};

pub(super) fn build(
    b: &mut GraphBuilder<'_>,
    labels: Outlet,
    predictions: Outlet,
    threshold: f32,
) -> Result<Vec<Outlet>> {
    let l = as_indicator(b, labels, 0.5)?;
    let p = as_indicator(b, predictions, threshold)?;
    hits(b, l, p)?.iter().map(|&x| b.reduce_sum(x, &[], false)).collect()
}

/// Per element, from 0/1 labels `l` and predictions `p`: `[true positive, false positive,
/// false negative]` indicators, for the caller to sum over what it counts.
pub(super) fn hits(b: &mut GraphBuilder<'_>, l: Outlet, p: Outlet) -> Result<[Outlet; 3]> {
    let one = b.scalar(1.0)?;
    let not_l = b.sub(one, l)?;
    let not_p = b.sub(one, p)?;
    Ok([b.mul(p, l)?, b.mul(p, not_l)?, b.mul(not_p, l)?])
}

pub(super) fn precision(s: &[Vec<f64>]) -> f64 {
    let (tp, fp) = (s.first().map_or(0.0, |v| v[0]), s.get(1).map_or(0.0, |v| v[0]));
    ratio(tp, tp + fp)
}

pub(super) fn recall(s: &[Vec<f64>]) -> f64 {
    let (tp, fn_) = (s.first().map_or(0.0, |v| v[0]), s.get(2).map_or(0.0, |v| v[0]));
    ratio(tp, tp + fn_)
}
