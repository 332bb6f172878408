//! The backward of `Relu`: the gradient where the output is positive, zero elsewhere.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Inputs: `(relu output, gradient of the output)`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReluGrad;

impl OpDef for ReluGrad {
    fn name(&self) -> &'static str {
        "ReluGrad"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        if inputs[0] != inputs[1] {
            return Err(format!("output and gradient facts differ: {} and {}", inputs[0], inputs[1]));
        }
        rules::unary_float(inputs)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // Piecewise linear in the gradient; piecewise constant in the output.
        let ggy = ctx.out_grad(0)?;
        let y = ctx.input(0);
        if ctx.needs(1) {
            let g = ctx.b.relu_grad(y, ggy)?;
            ctx.set(1, g);
        }
        if ctx.needs(0) {
            let z = ctx.b.zeros_like(y)?;
            ctx.set(0, z);
        }
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn relu_grad(&mut self, y: Outlet, gy: Outlet) -> Result<Outlet> {
        self.op(ReluGrad.into(), &[y, gy])
    }
}
