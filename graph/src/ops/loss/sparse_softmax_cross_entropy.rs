//! Cross entropy of logits against integer class labels, per example.

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Inputs: `(logits [.., C] f32, labels [..] i64)`; output: loss `[..]`. Computed as
/// `logsumexp(logits) - logits[label]`, which neither overflows nor takes `log(0)`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SparseSoftmaxCrossEntropy;

impl OpDef for SparseSoftmaxCrossEntropy {
    fn name(&self) -> &'static str {
        "SparseSoftmaxCrossEntropyWithLogits"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (logits, labels) = (&inputs[0], &inputs[1]);
        rules::expect_dtype(logits, DType::F32, "logits")?;
        rules::expect_dtype(labels, DType::I64, "labels")?;
        if logits.rank() == 0 {
            return Err("logits must have a class axis".to_string());
        }
        let outer = Shape(logits.shape.dims()[..logits.rank() - 1].to_vec());
        if labels.shape != outer {
            return Err(format!("labels must be {outer} for logits {}, found {}", logits.shape, labels.shape));
        }
        Ok(vec![Fact::f32(outer)])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // (softmax(logits) - one_hot(labels)) * gy
        let gy = ctx.out_grad(0)?;
        let (logits, labels) = (ctx.input(0), ctx.input(1));
        let classes =
            ctx.input_fact(0)?.shape.dims().last().and_then(|d| d.known()).ok_or_else(|| ctx.no_gradient())?;
        let p = ctx.b.softmax(logits, -1)?;
        let hot = ctx.b.one_hot(labels, classes)?;
        let d = ctx.b.sub(p, hot)?;
        let gy = ctx.b.expand_last(gy)?;
        let g = ctx.b.mul(d, gy)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        4 * inputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn sparse_softmax_cross_entropy(&mut self, logits: Outlet, labels: Outlet) -> Result<Outlet> {
        self.op(SparseSoftmaxCrossEntropy.into(), &[logits, labels])
    }
}
