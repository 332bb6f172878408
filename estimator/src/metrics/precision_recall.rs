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
    let one = b.scalar(1.0)?;
    let not_l = b.sub(one, l)?;
    let not_p = b.sub(one, p)?;
    let tp = b.mul(p, l)?;
    let fp = b.mul(p, not_l)?;
    let fn_ = b.mul(not_p, l)?;
    [tp, fp, fn_].iter().map(|&x| b.reduce_sum(x, &[], false)).collect()
}

pub(super) fn precision(s: &[Vec<f64>]) -> f64 {
    let (tp, fp) = (s.first().map_or(0.0, |v| v[0]), s.get(1).map_or(0.0, |v| v[0]));
    ratio(tp, tp + fp)
}

pub(super) fn recall(s: &[Vec<f64>]) -> f64 {
    let (tp, fn_) = (s.first().map_or(0.0, |v| v[0]), s.get(2).map_or(0.0, |v| v[0]));
    ratio(tp, tp + fn_)
}
