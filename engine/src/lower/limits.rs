//! Size limits that keep a mistyped spec (`units: 10000000000000000`) an error rather than an
//! arithmetic overflow in shape or cost computations. They are far above any model that
//! could be trained: 2^32 elements is 16 GiB of f32 per example or per variable.

use super::{LowerError, build::Lowering};
use crate::spec::FieldPath;
use engine_graph::{Dim, Outlet, Shape};

pub const MAX_ELEMENTS: u64 = 1 << 32;
/// Floating-point operations of one layer for one example.
pub const MAX_LAYER_FLOPS: u64 = 1 << 36;

/// Elements of one example of `shape` (a batch dimension `kN` counts `k`), if it fits in u64.
pub fn per_example(shape: &Shape) -> Option<u64> {
    shape.dims().iter().try_fold(1u64, |acc, d| {
        let n = match d {
            Dim::Known(n) | Dim::Batch(n) => *n as u64,
        };
        acc.checked_mul(n)
    })
}

/// The product of `dims`, if it fits in u64.
pub fn product(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

impl Lowering<'_, '_, '_> {
    /// A layer's output (or an input) must stay within [`MAX_ELEMENTS`] per example.
    pub fn check_output(&self, path: &FieldPath, x: Outlet) -> Result<(), LowerError> {
        let shape = self.shape_of(x)?;
        match per_example(&shape) {
            Some(n) if n <= MAX_ELEMENTS => Ok(()),
            _ => Err(self.shape_error(path, format!("{shape} has more than 2^32 elements per example"))),
        }
    }

    /// A variable of `dims` must stay within [`MAX_ELEMENTS`].
    pub fn check_variable(&self, path: &FieldPath, what: &str, dims: &[usize]) -> Result<(), LowerError> {
        let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        match product(&dims) {
            Some(n) if n <= MAX_ELEMENTS => Ok(()),
            _ => Err(self.shape_error(path, format!("the {what} {dims:?} would have more than 2^32 elements"))),
        }
    }

    /// A layer's cost per example (`factors` multiplied) must stay within [`MAX_LAYER_FLOPS`].
    pub fn check_flops(&self, path: &FieldPath, factors: &[u64]) -> Result<(), LowerError> {
        match product(factors) {
            Some(n) if n <= MAX_LAYER_FLOPS => Ok(()),
            _ => Err(self.shape_error(path, "the layer would cost more than 2^36 operations per example".to_string())),
        }
    }
}
