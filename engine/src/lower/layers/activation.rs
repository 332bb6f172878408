//! Activation functions, shared by `Dense`, `Conv2d` and the `Activation` layer.

use crate::spec::Activation;
use engine_graph::{GraphBuilder, Outlet, Result};

pub fn activate(b: &mut GraphBuilder<'_>, x: Outlet, a: Activation) -> Result<Outlet> {
    match a {
        Activation::Relu => b.relu(x),
        Activation::Sigmoid => b.sigmoid(x),
        Activation::Tanh => b.tanh(x),
        Activation::Gelu => b.gelu(x),
        Activation::Softmax => b.softmax(x, -1),
        Activation::Linear => Ok(x),
    }
}
