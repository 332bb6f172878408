//! `Dense`: `activation(x @ kernel + bias)` on the last axis.

use super::{Activation, Built, finish};
use crate::{Dim, GraphBuilder, GraphError, Initializer, Outlet, Result};

/// Keras' `Dense(units, activation, use_bias, kernel_initializer, bias_initializer)` on
/// `[batch, features]` or `[batch, tokens, features]` (every token alike).
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    pub units: usize,
    pub activation: Activation,
    pub use_bias: bool,
    pub kernel_initializer: Initializer,
    pub bias_initializer: Initializer,
}

impl Dense {
    pub fn new(units: usize) -> Self {
        Dense {
            units,
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

    pub fn use_bias(mut self, use_bias: bool) -> Self {
        self.use_bias = use_bias;
        self
    }

    pub fn kernel_initializer(mut self, init: Initializer) -> Self {
        self.kernel_initializer = init;
        self
    }

    /// Adds the layer under a fresh `dense` scope; its output.
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("dense");
        Ok(self.build(b, &name, x)?.output)
    }

    /// Adds the layer under scope `name`; its output and variables.
    pub fn build(&self, b: &mut GraphBuilder<'_>, name: &str, x: Outlet) -> Result<Built> {
        let shape = b.fact(x)?.shape.clone();
        let features = match shape.dims() {
            [n, Dim::Known(f)] | [n, Dim::Known(_), Dim::Known(f)] if n.is_batch() => *f,
            _ => {
                let hint = if shape.rank() > 3 { "; flatten it first" } else { "" };
                return Err(GraphError::invalid(
                    name,
                    format!(
                        "Dense needs an input of shape [batch, features] or [batch, tokens, features], got {shape}{hint}"
                    ),
                ));
            }
        };
        b.with_scope(name, |b| {
            let kernel = b.variable("kernel", &[features, self.units], self.kernel_initializer.clone(), true)?;
            let y = b.project(x, kernel)?;
            let bias = self.use_bias.then_some(&self.bias_initializer);
            finish(b, y, kernel, self.units, bias, self.activation)
        })
    }
}
