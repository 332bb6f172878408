//! Reductions over axes.

mod reduce_max;
mod reduce_mean;
mod reduce_sum;

pub use reduce_max::ReduceMax;
pub use reduce_mean::ReduceMean;
pub use reduce_sum::ReduceSum;

use crate::{DType, Dim, Fact, Shape};

/// The output fact of reducing `x` over `axes` (already normalized).
pub(crate) fn reduced(x: &Fact, axes: &[usize], keep_dims: bool, dtypes: &[DType]) -> Result<Vec<Fact>, String> {
    if !dtypes.contains(&x.dtype) {
        return Err(format!("cannot reduce a {} tensor", x.dtype));
    }
    if let Some(a) = axes.iter().find(|&&a| a >= x.rank()) {
        return Err(format!("axis {a} is out of range for {}", x.shape));
    }
    Ok(vec![Fact::new(x.dtype, kept_shape(&x.shape, axes, keep_dims))])
}

pub(crate) fn kept_shape(shape: &Shape, axes: &[usize], keep_dims: bool) -> Shape {
    let mut dims = Vec::new();
    for (i, d) in shape.dims().iter().enumerate() {
        if axes.contains(&i) {
            if keep_dims {
                dims.push(Dim::Known(1));
            }
        } else {
            dims.push(*d);
        }
    }
    Shape(dims)
}
