//! Keras-named layers over the builder: `Dense`, `Conv2D`, `MaxPooling2D`,
//! `AveragePooling2D`, `GlobalAveragePooling2D` and `1D`, `ZeroPadding2D`, `Flatten`,
//! `Reshape`, `Dropout`, `BatchNormalization`, `LayerNormalization`, `MultiHeadAttention`,
//! `AddPositionEmbedding`, `Embedding`, `Add`, `Multiply`, `Concatenate`: every layer a job
//! spec has, each a small value whose `apply` adds its variables and nodes under a fresh
//! scope (`dense`, `dense_1`, ... as Keras names layers), with Keras' defaults
//! (Glorot-uniform kernels, zero biases, `valid` padding). The spec's layers lower through
//! the same code, so a model written here and one written in RON build the same graph.
//!
//! ```
//! use engine_graph::{DType, Graph, GraphBuilder, Shape};
//! use engine_graph::layers::{Activation, Conv2D, Dense, Flatten, MaxPooling2D};
//!
//! let mut graph = Graph::new();
//! let mut b = GraphBuilder::new(&mut graph);
//! let images = b.placeholder("x", DType::F32, Shape::batched(&[28, 28, 1]))?;
//! let x = Conv2D::new(32, 3).activation(Activation::Relu).apply(&mut b, images)?;
//! let x = MaxPooling2D::new(2).apply(&mut b, x)?;
//! let x = Flatten.apply(&mut b, x)?;
//! let x = Dense::new(64).activation(Activation::Relu).apply(&mut b, x)?;
//! let logits = Dense::new(10).apply(&mut b, x)?;
//! assert_eq!(b.fact(logits)?.shape.to_string(), "[N, 10]");
//! assert!(b.graph().find("dense_1/kernel").is_ok());
//! # Ok::<(), engine_graph::GraphError>(())
//! ```

mod attention;
mod conv;
mod dense;
mod merge;
mod normalization;
mod pooling;
mod simple;

pub use attention::{AddPositionEmbedding, Embedding, MultiHeadAttention};
pub use conv::Conv2D;
pub use dense::Dense;
pub use merge::{Add, Concatenate, Multiply};
pub use normalization::{BatchNormalization, LayerNormalization};
pub use pooling::{AveragePooling2D, GlobalAveragePooling1D, GlobalAveragePooling2D, ZeroPadding2D, global_average};
pub use simple::{Dropout, Flatten, MaxPooling2D, Reshape};

use crate::{GraphBuilder, Outlet, Result};
use serde::{Deserialize, Serialize};

/// The activations layers take (`activation='relu'` in Keras).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Activation {
    #[default]
    Linear,
    Relu,
    Sigmoid,
    Tanh,
    /// The exact GELU (Keras' default, `approximate=False`).
    Gelu,
    /// Over the last axis.
    Softmax,
}

impl Activation {
    pub fn apply(self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        match self {
            Activation::Relu => b.relu(x),
            Activation::Sigmoid => b.sigmoid(x),
            Activation::Tanh => b.tanh(x),
            Activation::Gelu => b.gelu(x),
            Activation::Softmax => b.softmax(x, -1),
            Activation::Linear => Ok(x),
        }
    }
}

/// A layer's output and its variables (regularizers and tests need the kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Built {
    pub output: Outlet,
    pub kernel: Outlet,
    pub bias: Option<Outlet>,
}

/// The common tail of `Dense` and `Conv2D`: a bias of `units` (when initialized), then
/// the activation.
fn finish(
    b: &mut GraphBuilder<'_>,
    y: Outlet,
    kernel: Outlet,
    units: usize,
    bias: Option<&crate::Initializer>,
    activation: Activation,
) -> Result<Built> {
    let (y, bias) = match bias {
        Some(init) => {
            let v = b.variable("bias", &[units], init.clone(), true)?;
            (b.add(y, v)?, Some(v))
        }
        None => (y, None),
    };
    Ok(Built { output: activation.apply(b, y)?, kernel, bias })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Graph, Initializer, Shape};

    #[test]
    fn layers_name_their_scopes_like_keras_and_refuse_bad_inputs() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let images = b.placeholder("x", DType::F32, Shape::batched(&[8, 8, 3]))?;
        let conv = Conv2D::new(4, 3).apply(&mut b, images)?;
        assert_eq!(b.fact(conv)?.shape.to_string(), "[N, 6, 6, 4]");
        // A Dense straight on an image is refused, naming the layer.
        let err = Dense::new(2).apply(&mut b, conv).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("dense") && err.contains("flatten it first"), "{err}");
        let flat = Flatten.apply(&mut b, conv)?;
        let first = Dense::new(2).apply(&mut b, flat)?;
        Dense::new(2).apply(&mut b, first)?;
        assert!(b.graph().find("conv2d/kernel").is_ok() && b.graph().find("dense_1/bias").is_ok());
        Ok(())
    }

    #[test]
    fn a_variable_declared_twice_is_refused() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        b.with_scope("dense", |b| b.variable("kernel", &[2, 2], Initializer::Zeros, true))?;
        let again = b.with_scope("dense", |b| b.variable("kernel", &[2, 2], Initializer::Zeros, true));
        let err = again.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("dense/kernel") && err.contains("exists already"), "{err}");
        Ok(())
    }
}
