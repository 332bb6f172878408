//! The backward of max pooling from the pooled values and argmax alone, when the pool's
//! input was never stored (it was fused into the op that produced it).

use super::padding::{Window, nhwc, spatial};
use crate::{
    DType, Dim, Fact,
    ops::{Arity, OpDef, rules},
};

/// Inputs: `(pooled values, argmax positions, gradient of the pooled values)`; output: the
/// gradient of the pool's input, of height and width `input_hw`. TensorFlow's
/// `MaxPoolGradWithArgmax`.
///
/// With `relu_mask`, the pool read a ReLU's output: a gradient whose pooled value is not
/// positive is dropped (the maximum of ReLU outputs is positive exactly when the ReLU
/// passed it), which is `MaxPool2dGrad`'s mask computed without the pool's input.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MaxPoolGradWithArgmax {
    pub window: Window,
    pub input_hw: [usize; 2],
    pub relu_mask: bool,
}

impl OpDef for MaxPoolGradWithArgmax {
    fn name(&self) -> &'static str {
        "MaxPoolGradWithArgmax"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (pooled, idx, gy) = (&inputs[0], &inputs[1], &inputs[2]);
        rules::expect_dtype(pooled, DType::F32, "pooled values")?;
        rules::expect_dtype(idx, DType::I64, "argmax")?;
        let (ohw, _) = self.window.output(self.input_hw)?;
        if spatial(gy, "output gradient")? != ohw || idx.shape != gy.shape || pooled.shape != gy.shape {
            return Err(format!(
                "pooled values {}, argmax {} and gradient {} must all be the pooling of {:?}",
                pooled.shape, idx.shape, gy.shape, self.input_hw
            ));
        }
        let channels: Dim = gy.shape.dim(3);
        Ok(vec![Fact::f32(nhwc(gy.shape.dim(0), self.input_hw, channels))])
    }
}
