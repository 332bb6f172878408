//! max(x, 0).

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Relu;

impl OpDef for Relu {
    fn name(&self) -> &'static str {
        "Relu"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::unary_float(inputs)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // From the output, as TensorFlow's ReluGrad: the input can be freed after the forward op.
        let gy = ctx.out_grad(0)?;
        let y = ctx.output(0);
        let g = ctx.b.relu_grad(y, gy)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn relu(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Relu.into(), &[x])
    }
}
