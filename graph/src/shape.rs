//! Shapes with a symbolic batch dimension.
//!
//! A graph is compiled once and run with any batch size (the last partial batch of an
//! evaluation, a per-replica batch under a strategy), so the batch size is a symbol `N`
//! rather than a number. A dimension is either a known size or a multiple of `N`; that is
//! enough to express flattening (`[N, 13, 13, 32] -> [N, 5408]`) and patch matrices
//! (`[N*676, 9]`) while keeping every other dimension exact, so shape errors are still
//! found at compile time.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One dimension: a known size, or `k * N` for the batch symbol `N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Dim {
    Known(usize),
    /// `factor * N`; the batch dimension itself is `Batch(1)`.
    Batch(usize),
}

impl Dim {
    pub const N: Dim = Dim::Batch(1);

    /// The concrete size once the batch size is known.
    pub fn resolve(self, batch: usize) -> usize {
        match self {
            Dim::Known(n) => n,
            Dim::Batch(k) => k * batch,
        }
    }

    pub fn known(self) -> Option<usize> {
        match self {
            Dim::Known(n) => Some(n),
            Dim::Batch(_) => None,
        }
    }

    pub fn is_batch(self) -> bool {
        matches!(self, Dim::Batch(_))
    }

    /// `self * other`, if the product is still expressible (at most one factor of `N`).
    pub fn times(self, other: Dim) -> Option<Dim> {
        match (self, other) {
            (Dim::Known(a), Dim::Known(b)) => Some(Dim::Known(a * b)),
            (Dim::Known(a), Dim::Batch(k)) | (Dim::Batch(k), Dim::Known(a)) => {
                Some(if a == 0 { Dim::Known(0) } else { Dim::Batch(a * k) })
            }
            (Dim::Batch(_), Dim::Batch(_)) => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Batch(1) => f.write_str("N"),
            Dim::Batch(k) => write!(f, "{k}N"),
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Self {
        Dim::Known(n)
    }
}

/// An ordered list of dimensions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn scalar() -> Self {
        Shape(Vec::new())
    }

    pub fn known(dims: &[usize]) -> Self {
        Shape(dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    /// `[N, dims...]`: a batch of examples of the given shape.
    pub fn batched(dims: &[usize]) -> Self {
        let mut v = vec![Dim::N];
        v.extend(dims.iter().map(|&d| Dim::Known(d)));
        Shape(v)
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    pub fn dim(&self, axis: usize) -> Dim {
        self.0[axis]
    }

    /// The number of elements as a dimension (`k * N` or known), if expressible.
    pub fn volume(&self) -> Option<Dim> {
        self.0.iter().try_fold(Dim::Known(1), |acc, &d| acc.times(d))
    }

    /// The concrete dimensions for a batch size.
    pub fn resolve(&self, batch: usize) -> Vec<usize> {
        self.0.iter().map(|d| d.resolve(batch)).collect()
    }

    /// The concrete dimensions if no dimension depends on the batch.
    pub fn as_known(&self) -> Option<Vec<usize>> {
        self.0.iter().map(|d| d.known()).collect()
    }

    pub fn has_batch(&self) -> bool {
        self.0.iter().any(|d| d.is_batch())
    }

    /// The number of elements for a batch size.
    pub fn num_elements(&self, batch: usize) -> usize {
        self.0.iter().map(|d| d.resolve(batch)).product()
    }

    /// NumPy broadcasting: dimensions are aligned from the right and must be equal or 1.
    pub fn broadcast(&self, other: &Shape) -> Option<Shape> {
        let rank = self.rank().max(other.rank());
        let mut out = Vec::with_capacity(rank);
        for i in 0..rank {
            let a = dim_from_right(self, rank, i);
            let b = dim_from_right(other, rank, i);
            out.push(match (a, b) {
                (x, y) if x == y => x,
                (Dim::Known(1), y) => y,
                (x, Dim::Known(1)) => x,
                _ => return None,
            });
        }
        Some(Shape(out))
    }

    /// Normalizes a possibly negative axis (Python style) against this rank.
    pub fn axis(&self, axis: i64) -> Option<usize> {
        let rank = self.rank() as i64;
        let a = if axis < 0 { axis + rank } else { axis };
        (0..rank).contains(&a).then_some(a as usize)
    }
}

fn dim_from_right(s: &Shape, rank: usize, i: usize) -> Dim {
    let offset = rank - s.rank();
    if i < offset { Dim::Known(1) } else { s.0[i - offset] }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(v: Vec<Dim>) -> Self {
        Shape(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        let a = Shape::batched(&[64]);
        let b = Shape::known(&[64]);
        assert_eq!(a.broadcast(&b), Some(Shape::batched(&[64])));
        let c = Shape::known(&[1, 64]);
        assert_eq!(a.broadcast(&c), Some(Shape::batched(&[64])));
        assert_eq!(a.broadcast(&Shape::known(&[10])), None);
        assert_eq!(Shape::scalar().broadcast(&a), Some(a.clone()));
    }

    #[test]
    fn volumes_keep_one_batch_factor() {
        assert_eq!(Shape::batched(&[13, 13, 32]).volume(), Some(Dim::Batch(5408)));
        assert_eq!(Shape(vec![Dim::N, Dim::N]).volume(), None);
        assert_eq!(Shape::batched(&[3]).resolve(5), vec![5, 3]);
        assert_eq!(Shape::batched(&[2, 3]).to_string(), "[N, 2, 3]");
    }

    #[test]
    fn negative_axes_count_from_the_end() {
        let s = Shape::batched(&[2, 3]);
        assert_eq!(s.axis(-1), Some(2));
        assert_eq!(s.axis(3), None);
        assert_eq!(s.axis(-4), None);
    }
}
