//! The backward of `MaxPool2d`: each output gradient goes to the input that was the maximum.

use super::padding::{Window, spatial};
use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    ops::{Arity, OpDef, rules},
};

/// Inputs: `(pool input, argmax positions, gradient of the pooled values)`.
///
/// With `relu_mask`, a gradient landing on a non-positive input is dropped: the fusion of
/// `ReluGrad(y, MaxPoolGrad(y, ...))` when the pool reads a ReLU's output `y`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MaxPool2dGrad {
    pub window: Window,
    pub relu_mask: bool,
}

impl OpDef for MaxPool2dGrad {
    fn name(&self) -> &'static str {
        "MaxPoolGrad"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (x, idx, gy) = (&inputs[0], &inputs[1], &inputs[2]);
        rules::expect_dtype(idx, DType::I64, "argmax")?;
        let (ohw, _) = self.window.output(spatial(x, "input")?)?;
        if spatial(gy, "output gradient")? != ohw || idx.shape != gy.shape {
            return Err(format!("gradient {} and argmax {} must be pooled {}", gy.shape, idx.shape, x.shape));
        }
        Ok(vec![x.clone()])
    }
}

impl GraphBuilder<'_> {
    pub fn max_pool2d_grad(&mut self, x: Outlet, argmax: Outlet, gy: Outlet, window: Window) -> Result<Outlet> {
        self.op(MaxPool2dGrad { window, relu_mask: false }.into(), &[x, argmax, gy])
    }
}
