//! Precision and recall of a multi-class classifier, per class: state `[true positives,
//! false positives, false negatives]`, each a vector over the classes, so one class
//! (`class_id`), the mean over classes (macro) or the pooled counts (micro) all come from
//! the same exact, mergeable counts.

use super::ratio;
use engine_graph::{GraphBuilder, Outlet, Result};

/// Which precision or recall of the per-class counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    /// One class against the rest (Keras' `class_id`).
    Class(usize),
    /// The unweighted mean over the classes that occur in the labels or the predictions,
    /// as scikit-learn's `average="macro"`.
    Macro,
    /// From the counts pooled over classes (for single-label classes, the accuracy).
    Micro,
}

pub(super) fn build(
    b: &mut GraphBuilder<'_>,
    labels: Outlet,
    classes: Outlet,
    num_classes: usize,
) -> Result<Vec<Outlet>> {
    let l = super::one_hot_classes(b, labels, num_classes)?;
    let p = super::one_hot_classes(b, classes, num_classes)?;
    super::precision_recall::hits(b, l, p)?.iter().map(|&x| b.reduce_sum(x, &[0], false)).collect()
}

/// Precision (`recall` false) or recall from the accumulated per-class counts.
pub(super) fn result(s: &[Vec<f64>], select: Select, recall: bool) -> f64 {
    let empty = Vec::new();
    let (tp, fp, fn_) = (s.first().unwrap_or(&empty), s.get(1).unwrap_or(&empty), s.get(2).unwrap_or(&empty));
    let wrong = if recall { fn_ } else { fp };
    let at = |v: &Vec<f64>, k: usize| v.get(k).copied().unwrap_or(0.0);
    match select {
        Select::Class(k) => ratio(at(tp, k), at(tp, k) + at(wrong, k)),
        Select::Micro => {
            let (t, w): (f64, f64) = (tp.iter().sum(), wrong.iter().sum());
            ratio(t, t + w)
        }
        Select::Macro => {
            let present: Vec<usize> = (0..tp.len()).filter(|&k| at(tp, k) + at(fp, k) + at(fn_, k) > 0.0).collect();
            let sum: f64 = present.iter().map(|&k| ratio(at(tp, k), at(tp, k) + at(wrong, k))).sum();
            ratio(sum, present.len() as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts of labels [0, 0, 1, 2, 2, 2] predicted as [0, 1, 1, 2, 0, 2]: scikit-learn gives
    /// precision macro 0.6667 and micro 0.6667, recall macro 0.7222, class 2 precision 1.0
    /// and recall 0.6667.
    #[test]
    fn class_macro_and_micro_agree_with_scikit_learn() {
        let tp = vec![1.0, 1.0, 2.0];
        let fp = vec![1.0, 1.0, 0.0];
        let fn_ = vec![1.0, 0.0, 1.0];
        let s = vec![tp, fp, fn_];
        assert!((result(&s, Select::Macro, false) - 2.0 / 3.0).abs() < 1e-9);
        assert!((result(&s, Select::Micro, false) - 2.0 / 3.0).abs() < 1e-9);
        assert!((result(&s, Select::Macro, true) - 0.722_222).abs() < 1e-5);
        assert_eq!(result(&s, Select::Class(2), false), 1.0);
        assert!((result(&s, Select::Class(2), true) - 2.0 / 3.0).abs() < 1e-9);
    }
}
