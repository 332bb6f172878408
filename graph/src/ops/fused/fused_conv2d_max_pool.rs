//! `max_pool(activation(conv2d(x, w) + bias))` in one op: the convolution's output, the
//! largest tensor of a CNN's usual block, is pooled while it is still in cache and never
//! written to memory.

use super::{FusedActivation, FusedConv2d};
use crate::{
    DType, Fact,
    ops::{
        Arity, MaxPool2d, OpDef,
        nn::{Padding, Window},
    },
};

/// Inputs: `(x NHWC, filter HWIO, bias)`, then with `residual` an addend of the
/// convolution's output shape (see `FusedConv2d`); outputs: `(pooled values, argmax positions)`,
/// exactly as `MaxPool2d` on the `FusedConv2d` output would give them (positions count
/// cells of the convolution's output plane), so the backward ops read them unchanged.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedConv2dMaxPool {
    pub strides: [usize; 2],
    pub padding: Padding,
    pub activation: FusedActivation,
    pub pool: Window,
    #[serde(default)]
    pub residual: bool,
}

impl FusedConv2dMaxPool {
    pub fn conv(&self) -> FusedConv2d {
        FusedConv2d {
            strides: self.strides,
            padding: self.padding,
            activation: self.activation,
            residual: self.residual,
        }
    }
}

impl OpDef for FusedConv2dMaxPool {
    fn name(&self) -> &'static str {
        "_FusedConv2DMaxPool"
    }
    fn arity(&self) -> Arity {
        self.conv().arity()
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let conv = self.conv().infer(inputs)?;
        let pooled = MaxPool2d { window: self.pool }.infer(&conv)?;
        debug_assert!(pooled[1].dtype == DType::I64);
        Ok(pooled)
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        match self.conv().infer(inputs) {
            Ok(conv) => {
                self.conv().flops(inputs, &conv, batch) + MaxPool2d { window: self.pool }.flops(&conv, outputs, batch)
            }
            Err(_) => 0,
        }
    }
}
