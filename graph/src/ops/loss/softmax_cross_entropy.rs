//! Cross entropy of logits against a probability distribution (one-hot or soft labels).

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Inputs: `(logits [.., C], labels [.., C])`, both f32; output `[..]`:
/// `-sum(labels * log_softmax(logits))`, stable for any logits.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SoftmaxCrossEntropy;

impl OpDef for SoftmaxCrossEntropy {
    fn name(&self) -> &'static str {
        "SoftmaxCrossEntropyWithLogits"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (logits, labels) = (&inputs[0], &inputs[1]);
        rules::expect_dtype(logits, DType::F32, "logits")?;
        if labels != logits {
            return Err(format!("labels {labels} must match logits {logits}"));
        }
        if logits.rank() == 0 {
            return Err("logits must have a class axis".to_string());
        }
        Ok(vec![Fact::f32(Shape(logits.shape.dims()[..logits.rank() - 1].to_vec()))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let (logits, labels) = (ctx.input(0), ctx.input(1));
        let gy = ctx.b.expand_last(gy)?;
        if ctx.needs(0) {
            // (softmax(logits) - labels) * gy; exact for soft labels that sum to one.
            let p = ctx.b.softmax(logits, -1)?;
            let total = ctx.b.reduce_sum(labels, &[ctx.input_fact(1)?.rank() - 1], true)?;
            let scaled = ctx.b.mul(p, total)?;
            let d = ctx.b.sub(scaled, labels)?;
            let g = ctx.b.mul(d, gy)?;
            ctx.set(0, g);
        }
        if ctx.needs(1) {
            let lsm = ctx.b.log_softmax(logits, -1)?;
            let neg = ctx.b.neg(lsm)?;
            let g = ctx.b.mul(neg, gy)?;
            ctx.set(1, g);
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        5 * inputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn softmax_cross_entropy(&mut self, logits: Outlet, labels: Outlet) -> Result<Outlet> {
        self.op(SoftmaxCrossEntropy.into(), &[logits, labels])
    }
}
