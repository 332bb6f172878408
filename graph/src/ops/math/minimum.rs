//! Elementwise minimum; on ties the gradient goes to the first operand, as in TensorFlow.

use super::maximum::route_gradient;
use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Minimum;

impl OpDef for Minimum {
    fn name(&self) -> &'static str {
        "Minimum"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::broadcast(inputs, None)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let (a, b) = (ctx.input(0), ctx.input(1));
        let b_wins = ctx.b.greater(a, b)?;
        route_gradient(ctx, b_wins)
    }
}

impl GraphBuilder<'_> {
    pub fn minimum(&mut self, a: Outlet, b: Outlet) -> Result<Outlet> {
        self.op(Minimum.into(), &[a, b])
    }
}
