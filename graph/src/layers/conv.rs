//! `Conv2D`: NHWC convolution with an HWIO kernel (`[kh, kw, channels / groups, filters]`),
//! optionally strided, dilated and grouped, then bias and activation.

use super::{Activation, Built, finish};
use crate::{
    Dim, GraphBuilder, GraphError, Initializer, Outlet, Result,
    ops::{self, Padding},
};

/// Keras' `Conv2D(filters, kernel_size, strides, padding, dilation_rate, groups,
/// activation, use_bias, kernel_initializer, bias_initializer)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Conv2D {
    pub filters: usize,
    pub kernel_size: [usize; 2],
    pub strides: [usize; 2],
    pub padding: Padding,
    pub dilation_rate: [usize; 2],
    pub groups: usize,
    pub activation: Activation,
    pub use_bias: bool,
    pub kernel_initializer: Initializer,
    pub bias_initializer: Initializer,
}

impl Conv2D {
    /// `filters` of `kernel_size × kernel_size`, stride 1, `valid` padding.
    pub fn new(filters: usize, kernel_size: usize) -> Self {
        Conv2D {
            filters,
            kernel_size: [kernel_size; 2],
            strides: [1, 1],
            padding: Padding::Valid,
            dilation_rate: [1, 1],
            groups: 1,
            activation: Activation::Linear,
            use_bias: true,
            kernel_initializer: Initializer::GlorotUniform,
            bias_initializer: Initializer::Zeros,
        }
    }

    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    pub fn kernel_size(mut self, kernel_size: [usize; 2]) -> Self {
        self.kernel_size = kernel_size;
        self
    }

    pub fn strides(mut self, strides: [usize; 2]) -> Self {
        self.strides = strides;
        self
    }

    pub fn padding(mut self, padding: Padding) -> Self {
        self.padding = padding;
        self
    }

    /// Adds the layer under a fresh `conv2d` scope; its output.
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("conv2d");
        Ok(self.build(b, &name, x)?.output)
    }

    /// The convolution's attributes (stride, padding, dilation, groups).
    pub fn op(&self) -> ops::Conv2d {
        ops::Conv2d { strides: self.strides, padding: self.padding, dilation: self.dilation_rate, groups: self.groups }
    }

    /// Adds the layer under scope `name`; its output and variables.
    pub fn build(&self, b: &mut GraphBuilder<'_>, name: &str, x: Outlet) -> Result<Built> {
        let shape = b.fact(x)?.shape.clone();
        let channels = match shape.dims() {
            [n, Dim::Known(_), Dim::Known(_), Dim::Known(c)] if n.is_batch() => *c,
            _ => {
                return Err(GraphError::invalid(
                    name,
                    format!("Conv2D needs an input of shape [batch, height, width, channels], got {shape}"),
                ));
            }
        };
        if self.groups == 0 || channels % self.groups != 0 {
            return Err(GraphError::invalid(
                name,
                format!("the input's {channels} channels do not split into {} groups", self.groups),
            ));
        }
        let [kh, kw] = self.kernel_size;
        b.with_scope(name, |b| {
            let kernel_shape = [kh, kw, channels / self.groups, self.filters];
            let kernel = b.variable("kernel", &kernel_shape, self.kernel_initializer.clone(), true)?;
            let y = b.conv2d_general(x, kernel, self.op())?;
            let bias = self.use_bias.then_some(&self.bias_initializer);
            finish(b, y, kernel, self.filters, bias, self.activation)
        })
    }
}
