//! TensorFlow's VALID and SAME padding arithmetic, shared by convolution and pooling.

use crate::{Dim, Fact, Shape};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Padding {
    #[default]
    Valid,
    Same,
}

/// A 2-D sliding window: kernel size, strides, padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Window {
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub padding: Padding,
}

impl Window {
    /// Output size and `(before, after)` padding along one spatial axis. SAME pads the
    /// extra element after, as TensorFlow does.
    pub fn axis(&self, axis: usize, input: usize) -> Result<(usize, usize, usize), String> {
        let (k, s) = (self.kernel[axis], self.strides[axis]);
        if k == 0 || s == 0 {
            return Err("kernel sizes and strides must be positive".to_string());
        }
        match self.padding {
            Padding::Valid => {
                if input < k {
                    return Err(format!("input size {input} is smaller than the window {k} (VALID padding)"));
                }
                Ok(((input - k) / s + 1, 0, 0))
            }
            Padding::Same => {
                let out = input.div_ceil(s);
                let total = ((out - 1) * s + k).saturating_sub(input);
                Ok((out, total / 2, total - total / 2))
            }
        }
    }

    /// `(out_h, out_w)` and pads `[top, bottom, left, right]` for an input of `[h, w]`.
    pub fn output(&self, hw: [usize; 2]) -> Result<([usize; 2], [usize; 4]), String> {
        let (oh, t, b) = self.axis(0, hw[0])?;
        let (ow, l, r) = self.axis(1, hw[1])?;
        Ok(([oh, ow], [t, b, l, r]))
    }

    pub fn is_symmetric(&self, hw: [usize; 2]) -> bool {
        self.output(hw).map(|(_, p)| p[0] == p[1] && p[2] == p[3]).unwrap_or(false)
    }
}

/// The `[h, w]` of an NHWC fact with known spatial dimensions.
pub(crate) fn spatial(x: &Fact, what: &str) -> Result<[usize; 2], String> {
    if x.rank() != 4 {
        return Err(format!("{what} must be NHWC (rank 4), found {}", x.shape));
    }
    match (x.shape.dim(1), x.shape.dim(2)) {
        (Dim::Known(h), Dim::Known(w)) => Ok([h, w]),
        _ => Err(format!("{what} must have known height and width, found {}", x.shape)),
    }
}

pub(crate) fn nhwc(n: Dim, hw: [usize; 2], c: Dim) -> Shape {
    Shape(vec![n, Dim::Known(hw[0]), Dim::Known(hw[1]), c])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_padding_matches_tensorflow() -> Result<(), String> {
        let w = Window { kernel: [3, 3], strides: [1, 1], padding: Padding::Same };
        assert_eq!(w.output([28, 28])?, ([28, 28], [1, 1, 1, 1]));
        let w = Window { kernel: [2, 2], strides: [2, 2], padding: Padding::Same };
        assert_eq!(w.output([13, 13])?, ([7, 7], [0, 1, 0, 1]));
        let w = Window { kernel: [3, 3], strides: [2, 2], padding: Padding::Valid };
        assert_eq!(w.output([28, 28])?, ([13, 13], [0, 0, 0, 0]));
        assert!(Window { kernel: [5, 5], strides: [1, 1], padding: Padding::Valid }.output([3, 3]).is_err());
        Ok(())
    }
}
