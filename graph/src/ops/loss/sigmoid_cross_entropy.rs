//! Elementwise logistic loss of logits against labels in [0, 1].

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// `max(x, 0) - x * z + log(1 + exp(-|x|))`: TensorFlow's stable form of
/// `-z log(sigmoid(x)) - (1 - z) log(1 - sigmoid(x))`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SigmoidCrossEntropy;

impl OpDef for SigmoidCrossEntropy {
    fn name(&self) -> &'static str {
        "SigmoidCrossEntropyWithLogits"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::expect_dtype(&inputs[0], DType::F32, "logits")?;
        if inputs[0] != inputs[1] {
            return Err(format!("labels {} must match logits {}", inputs[1], inputs[0]));
        }
        Ok(vec![inputs[0].clone()])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let (x, z) = (ctx.input(0), ctx.input(1));
        if ctx.needs(0) {
            let s = ctx.b.sigmoid(x)?;
            let d = ctx.b.sub(s, z)?;
            let g = ctx.b.mul(d, gy)?;
            ctx.set(0, g);
        }
        if ctx.needs(1) {
            let nx = ctx.b.neg(x)?;
            let g = ctx.b.mul(nx, gy)?;
            ctx.set(1, g);
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        6 * inputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn sigmoid_cross_entropy(&mut self, logits: Outlet, labels: Outlet) -> Result<Outlet> {
        self.op(SigmoidCrossEntropy.into(), &[logits, labels])
    }
}
