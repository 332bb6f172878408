//! The confusion matrix of a classifier: state `C x C` counts, row = the label's class,
//! column = the predicted class (scikit-learn's `confusion_matrix` layout), mergeable by
//! addition like every state. Not a scalar: evaluation writes it to TensorBoard as a table
//! and returns it beside the scalar results.

use engine_graph::{DType, Dim, GraphBuilder, Outlet, Result, Shape};

pub(super) fn build(
    b: &mut GraphBuilder<'_>,
    labels: Outlet,
    classes: Outlet,
    num_classes: usize,
) -> Result<Vec<Outlet>> {
    let one_hot = |b: &mut GraphBuilder<'_>, ids: Outlet, shape: [usize; 2]| -> Result<Outlet> {
        let hot = super::one_hot_classes(b, ids, num_classes)?;
        let n = b.fact(hot)?.shape.dim(0);
        let hot = b.cast(hot, DType::F32)?;
        b.reshape(hot, Shape(vec![n, Dim::Known(shape[0]), Dim::Known(shape[1])]))
    };
    let rows = one_hot(b, labels, [num_classes, 1])?;
    let columns = one_hot(b, classes, [1, num_classes])?;
    let pairs = b.mul(rows, columns)?;
    let counts = b.reduce_sum(pairs, &[0], false)?;
    Ok(vec![b.reshape(counts, Shape(vec![Dim::Known(num_classes * num_classes)]))?])
}

/// The matrix from the accumulated counts.
pub(super) fn matrix(s: &[Vec<f64>], num_classes: usize) -> Vec<Vec<u64>> {
    let counts = s.first().cloned().unwrap_or_default();
    (0..num_classes)
        .map(|row| {
            (0..num_classes).map(|col| counts.get(row * num_classes + col).copied().unwrap_or(0.0) as u64).collect()
        })
        .collect()
}

/// A Markdown table (TensorBoard's Text dashboard renders it): one row per label's class.
pub fn markdown(matrix: &[Vec<u64>], names: Option<&[String]>) -> String {
    let name = |k: usize| names.and_then(|n| n.get(k).cloned()).unwrap_or_else(|| k.to_string());
    let mut out = String::from("| label \\ predicted |");
    for k in 0..matrix.len() {
        out.push_str(&format!(" {} |", name(k)));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(matrix.len()));
    for (k, row) in matrix.iter().enumerate() {
        out.push_str(&format!("\n| **{}** |", name(k)));
        for c in row {
            out.push_str(&format!(" {c} |"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_label_class() {
        let m = matrix(&[vec![3.0, 1.0, 0.0, 2.0]], 2);
        assert_eq!(m, vec![vec![3, 1], vec![0, 2]]);
        let names = ["cat".to_string(), "dog".to_string()];
        assert_eq!(
            markdown(&m, Some(&names)),
            "| label \\ predicted | cat | dog |\n|---|---:|---:|\n| **cat** | 3 | 1 |\n| **dog** | 0 | 2 |"
        );
    }
}
