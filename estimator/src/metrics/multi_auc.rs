//! ROC AUC of a multi-class classifier, one class against the rest: state `[true positives,
//! false positives]` per class and threshold (`C x T`, class-major) and `[positives,
//! negatives]` per class, so one class (`class_id`), the mean over classes (macro, Keras'
//! `AUC(multi_label=True)`) and the pooled counts (micro, Keras' `AUC()` on one-hot labels)
//! all come from the same exact, mergeable counts, with `tf.metrics.auc`'s thresholds and
//! trapezoids.

use super::{Select, auc};
use engine_graph::{DType, Dim, GraphBuilder, HostTensor, Outlet, Result, Shape};

/// `labels`: class ids `[N]`, or probabilities `[N, C]` (a class is positive above 0.5);
/// `probabilities`: `[N, C]`.
pub(super) fn build(
    b: &mut GraphBuilder<'_>,
    labels: Outlet,
    probabilities: Outlet,
    num_classes: usize,
    num_thresholds: usize,
) -> Result<Vec<Outlet>> {
    let t = auc::thresholds(num_thresholds);
    let count = t.len();
    let l = match b.fact(labels)?.shape.rank() {
        2 => {
            let half = b.scalar(0.5)?;
            b.greater(labels, half)?
        }
        _ => super::one_hot_classes(b, labels, num_classes)?,
    };
    let l = b.cast(l, DType::F32)?;
    let p = b.cast(probabilities, DType::F32)?;
    let n = b.fact(p)?.shape.dim(0);
    let cube =
        |b: &mut GraphBuilder<'_>, x: Outlet| b.reshape(x, Shape(vec![n, Dim::Known(num_classes), Dim::Known(1)]));
    let (pc, lc) = (cube(b, p)?, cube(b, l)?);
    let thr = b.constant(HostTensor::f32(vec![1, 1, count], t)?)?;
    let above = b.greater(pc, thr)?;
    let above = b.cast(above, DType::F32)?;
    let one = b.scalar(1.0)?;
    let tp = b.mul(above, lc)?;
    let not_l = b.sub(one, lc)?;
    let fp = b.mul(above, not_l)?;
    let tp = b.reduce_sum(tp, &[0], false)?;
    let fp = b.reduce_sum(fp, &[0], false)?;
    let pos = b.reduce_sum(l, &[0], false)?;
    let neg_each = b.sub(one, l)?;
    let neg = b.reduce_sum(neg_each, &[0], false)?;
    Ok(vec![tp, fp, pos, neg])
}

/// The area for `select` from the accumulated counts. Macro averages the classes that have
/// both positives and negatives (the others have no ROC curve).
pub(super) fn result(s: &[Vec<f64>], select: Select) -> f64 {
    let empty = Vec::new();
    let (tp, fp) = (s.first().unwrap_or(&empty), s.get(1).unwrap_or(&empty));
    let (pos, neg) = (s.get(2).unwrap_or(&empty), s.get(3).unwrap_or(&empty));
    let classes = pos.len();
    if classes == 0 {
        return 0.0;
    }
    let per = tp.len() / classes;
    let class = |k: usize| -> Vec<Vec<f64>> {
        let rows = |v: &Vec<f64>| v.get(k * per..(k + 1) * per).map(<[f64]>::to_vec).unwrap_or_default();
        vec![rows(tp), rows(fp), vec![pos[k]], vec![neg.get(k).copied().unwrap_or(0.0)]]
    };
    match select {
        Select::Class(k) if k < classes => auc::result(&class(k)),
        Select::Class(_) => 0.0,
        Select::Micro => {
            let mut pooled = vec![vec![0.0; per], vec![0.0; per], vec![0.0], vec![0.0]];
            for k in 0..classes {
                for (acc, part) in pooled.iter_mut().zip(class(k)) {
                    acc.iter_mut().zip(part).for_each(|(a, x)| *a += x);
                }
            }
            auc::result(&pooled)
        }
        Select::Macro => {
            let defined: Vec<usize> =
                (0..classes).filter(|&k| pos[k] > 0.0 && neg.get(k).is_some_and(|&n| n > 0.0)).collect();
            let sum: f64 = defined.iter().map(|&k| auc::result(&class(k))).sum();
            super::ratio(sum, defined.len() as f64)
        }
    }
}
