//! ROC AUC from confusion counts at fixed thresholds (TensorFlow's `tf.metrics.auc`):
//! state `[true positives per threshold, false positives per threshold, positives,
//! negatives]`, result by the trapezoidal rule.

use super::{as_indicator, flat};
use engine_graph::{DType, Dim, GraphBuilder, HostTensor, Outlet, Result, Shape};

/// TensorFlow's thresholds: just below 0, evenly inside (0, 1), just above 1.
pub(super) fn thresholds(n: usize) -> Vec<f32> {
    const EPSILON: f32 = 1e-7;
    let n = n.max(3);
    let mut t = vec![-EPSILON];
    t.extend((1..n - 1).map(|i| i as f32 / (n - 1) as f32));
    t.push(1.0 + EPSILON);
    t
}

pub(super) fn build(
    b: &mut GraphBuilder<'_>,
    labels: Outlet,
    predictions: Outlet,
    num_thresholds: usize,
) -> Result<Vec<Outlet>> {
    let t = thresholds(num_thresholds);
    let count = t.len();
    let l = as_indicator(b, labels, 0.5)?;
    let p = flat(b, predictions)?;
    let p = b.cast(p, DType::F32)?;
    let n = b.fact(p)?.shape.dim(0);
    let column = |b: &mut GraphBuilder<'_>, x: Outlet| b.reshape(x, Shape(vec![n, Dim::Known(1)]));
    let pc = column(b, p)?;
    let lc = column(b, l)?;
    let thr = b.constant(HostTensor::f32(vec![1, count], t)?)?;
    let above = b.greater(pc, thr)?;
    let above = b.cast(above, DType::F32)?;
    let tp = b.mul(above, lc)?;
    let one = b.scalar(1.0)?;
    let not_l = b.sub(one, lc)?;
    let fp = b.mul(above, not_l)?;
    let tp = b.reduce_sum(tp, &[0], false)?;
    let fp = b.reduce_sum(fp, &[0], false)?;
    let pos = b.reduce_sum(l, &[], false)?;
    let neg_each = b.sub(one, l)?;
    let neg = b.reduce_sum(neg_each, &[], false)?;
    Ok(vec![tp, fp, pos, neg])
}

pub(super) fn result(s: &[Vec<f64>]) -> f64 {
    let (Some(tp), Some(fp)) = (s.first(), s.get(1)) else { return 0.0 };
    let pos = s.get(2).and_then(|v| v.first()).copied().unwrap_or(0.0);
    let neg = s.get(3).and_then(|v| v.first()).copied().unwrap_or(0.0);
    let rate = |x: f64, total: f64| if total > 0.0 { x / total } else { 0.0 };
    let tpr: Vec<f64> = tp.iter().map(|&x| rate(x, pos)).collect();
    let fpr: Vec<f64> = fp.iter().map(|&x| rate(x, neg)).collect();
    (0..tpr.len().saturating_sub(1)).map(|i| (fpr[i] - fpr[i + 1]) * (tpr[i] + tpr[i + 1]) / 2.0).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_bracket_the_unit_interval() {
        let t = thresholds(5);
        assert_eq!(t.len(), 5);
        assert!(t[0] < 0.0 && t[4] > 1.0);
        assert!((t[2] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn perfect_separation_has_unit_area() {
        // thresholds 3: [-e, 0.5, 1+e]; two positives at 0.9, two negatives at 0.1.
        let s = vec![vec![2.0, 2.0, 0.0], vec![2.0, 0.0, 0.0], vec![2.0], vec![2.0]];
        assert!((result(&s) - 1.0).abs() < 1e-12);
        let chance = vec![vec![2.0, 1.0, 0.0], vec![2.0, 1.0, 0.0], vec![2.0], vec![2.0]];
        assert!((result(&chance) - 0.5).abs() < 1e-12);
    }
}
