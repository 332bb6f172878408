//! The filter (and bias) gradient of a convolution whose output was max-pooled, straight
//! from the pooled gradient: the convolution-sized gradient between the two, three
//! quarters zeros for a 2x2 pool, is never written to memory.

use crate::{
    Fact,
    ops::{
        Arity, Conv2dBackpropFilter, MaxPoolGradWithArgmax, OpDef,
        nn::{Padding, Window},
    },
};

/// Inputs: `(conv input x, pooled values, argmax positions, gradient of the pooled
/// values)`; outputs: the filter gradient and, `with_bias`, the bias gradient. Equal to
/// `Conv2dBackpropFilter(x, MaxPoolGradWithArgmax(pooled, argmax, gradient))`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedMaxPoolConv2dBackpropFilter {
    pub filter_hw: [usize; 2],
    pub strides: [usize; 2],
    pub padding: Padding,
    pub with_bias: bool,
    pub pool: Window,
    /// The convolution's output height and width (the pool's input).
    pub conv_hw: [usize; 2],
    pub relu_mask: bool,
}

impl FusedMaxPoolConv2dBackpropFilter {
    pub fn unpool(&self) -> MaxPoolGradWithArgmax {
        MaxPoolGradWithArgmax { window: self.pool, input_hw: self.conv_hw, relu_mask: self.relu_mask }
    }

    pub fn filter_grad(&self) -> Conv2dBackpropFilter {
        let f = crate::ops::Conv2d::plain(self.strides, self.padding).backprop_filter(self.filter_hw);
        Conv2dBackpropFilter { with_bias: self.with_bias, ..f }
    }
}

impl OpDef for FusedMaxPoolConv2dBackpropFilter {
    fn name(&self) -> &'static str {
        "_FusedMaxPoolConv2DBackpropFilter"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let gy = self.unpool().infer(&inputs[1..])?;
        self.filter_grad().infer(&[inputs[0].clone(), gy[0].clone()])
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        match self.unpool().infer(&inputs[1..]) {
            Ok(gy) => self.filter_grad().flops(&[inputs[0].clone(), gy[0].clone()], outputs, batch),
            Err(_) => 0,
        }
    }
}
