//! Activation functions, shared by `Dense`, `Conv2d` and the `Activation` layer.

use crate::spec::Activation;
use engine_graph::{GraphBuilder, Outlet, Result};

pub fn activate(b: &mut GraphBuilder<'_>, x: Outlet, a: Activation) -> Result<Outlet> {
    a.apply(b, x)
}
