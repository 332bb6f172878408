//! `activation(conv2d(x, w) + bias)`, or `activation(conv2d(x, w) + bias + addend)` (a
//! residual block's skip connection), in one op.

use super::FusedActivation;
use crate::{
    Fact,
    ops::{Arity, Conv2d, OpDef, nn::Padding},
};

/// Inputs: `(x NHWC, filter HWIO, bias [out channels])`, then with `residual` an addend of
/// the output's shape (TensorFlow's `fused_ops = [BiasAdd, Add, Relu]`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedConv2d {
    pub strides: [usize; 2],
    pub padding: Padding,
    pub activation: FusedActivation,
    /// Whether a fourth input is added before the activation.
    #[serde(default)]
    pub residual: bool,
}

impl FusedConv2d {
    pub fn conv(&self) -> Conv2d {
        Conv2d::plain(self.strides, self.padding)
    }
}

impl OpDef for FusedConv2d {
    fn name(&self) -> &'static str {
        "_FusedConv2D"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(if self.residual { 4 } else { 3 })
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let out = self.conv().infer(&inputs[..2])?;
        let channels = out[0].shape.dims().last().copied();
        if inputs[2].rank() != 1 || inputs[2].shape.dims().first().copied() != channels {
            return Err(format!("bias {} does not match the {} output channels", inputs[2].shape, out[0].shape));
        }
        if let Some(addend) = inputs.get(3).filter(|_| self.residual)
            && (addend.shape != out[0].shape || addend.dtype != out[0].dtype)
        {
            return Err(format!("addend {} differs from the output {}", addend.shape, out[0].shape));
        }
        Ok(out)
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        let per_pixel = if self.residual { 3 } else { 2 };
        self.conv().flops(&inputs[..2], outputs, batch) + per_pixel * outputs[0].shape.num_elements(batch) as u64
    }
}
