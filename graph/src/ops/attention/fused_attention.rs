//! `softmax(q k^T * scale) v` per head, with dropout on the weights in training.

use super::FusedAttentionGrad;
use crate::{
    DType, Dim, Fact, GraphBuilder, GraphError, NodeId, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, Dropout, OpDef, rules},
};

/// Inputs: the projections `q [N, Tq, H*Dk]`, `k [N, Tk, H*Dk]` and `v [N, Tk, H*Dv]`, head
/// `h` in columns `h*D..(h+1)*D` (Keras' `EinsumDense` output, flattened). Outputs: the
/// attention `[N, Tq, H*Dv]` in the same layout, and the softmax weights `[N*H, Tq, Tk]`
/// before dropout, which the gradient reads (not differentiable themselves).
///
/// The dropout draws the same units as a [`Dropout`] op over the weights would: its mask
/// is a hash of each unit's index in `[N*H, Tq, Tk]`, so the fused and the composite plan
/// drop the same ones.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedAttention {
    pub heads: usize,
    /// Multiplies the queries before their product with the keys (`1 / sqrt(Dk)`).
    pub scale: f32,
    /// Dropout on the weights, in training graphs.
    pub dropout: Option<Dropout>,
}

/// The sizes one attention works with, checked from the input facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionDims {
    pub heads: usize,
    pub tq: usize,
    pub tk: usize,
    pub dk: usize,
    pub dv: usize,
}

impl FusedAttention {
    /// The gradient op that goes with this one.
    pub fn grad_op(&self) -> FusedAttentionGrad {
        FusedAttentionGrad { heads: self.heads, scale: self.scale, dropout: self.dropout.clone() }
    }

    /// Sizes from `(q, k, v)`: rank 3, f32, one leading dimension, known tokens and
    /// features that the heads divide.
    pub fn dims(heads: usize, q: &Fact, k: &Fact, v: &Fact) -> std::result::Result<AttentionDims, String> {
        let mut known = [[0usize; 2]; 3];
        for ((f, what), slot) in [(q, "query"), (k, "key"), (v, "value")].into_iter().zip(&mut known) {
            rules::expect_dtype(f, DType::F32, what)?;
            match f.shape.dims() {
                [_, Dim::Known(t), Dim::Known(d)] => *slot = [*t, *d],
                _ => return Err(format!("{what} {} must be [batch, tokens, features]", f.shape)),
            }
            if f.shape.dim(0) != q.shape.dim(0) {
                return Err(format!("{what} {} and query {} differ in their batch", f.shape, q.shape));
            }
            if slot[0] == 0 || slot[1] == 0 {
                return Err(format!("{what} {} has no tokens or no features", f.shape));
            }
            if heads == 0 || !slot[1].is_multiple_of(heads) {
                return Err(format!("{what}'s {} features do not split into {heads} heads", slot[1]));
            }
        }
        let [[tq, qd], [tk, kd], [tv, vd]] = known;
        if qd != kd {
            return Err(format!("query {} and key {} differ in their features", q.shape, k.shape));
        }
        if tk != tv {
            return Err(format!("key {} and value {} differ in their tokens", k.shape, v.shape));
        }
        Ok(AttentionDims { heads, tq, tk, dk: qd / heads, dv: vd / heads })
    }

    /// The weights' shape `[N*H, Tq, Tk]` for a query of shape `q`.
    pub fn weights_shape(heads: usize, q: &Shape, tk: usize) -> Shape {
        let lead = match q.dim(0) {
            Dim::Known(n) => Dim::Known(n * heads),
            Dim::Batch(f) => Dim::Batch(f * heads),
        };
        Shape(vec![lead, q.dim(1), Dim::Known(tk)])
    }
}

impl OpDef for FusedAttention {
    fn name(&self) -> &'static str {
        "FusedAttention"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[Fact]) -> std::result::Result<Vec<Fact>, String> {
        let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
        let d = Self::dims(self.heads, q, k, v)?;
        if let Some(drop) = &self.dropout
            && !(0.0..1.0).contains(&drop.rate)
        {
            return Err(format!("dropout rate must be in [0, 1), found {}", drop.rate));
        }
        let out = Shape(vec![q.shape.dim(0), Dim::Known(d.tq), Dim::Known(d.heads * d.dv)]);
        Ok(vec![Fact::f32(out), Fact::f32(Self::weights_shape(self.heads, &q.shape, d.tk))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        if ctx.out_grad_opt(1).is_some() {
            return Err(GraphError::invalid(
                "FusedAttention",
                "a gradient through the attention weights (output 1): only the attention itself is differentiable",
            ));
        }
        let Some(gy) = ctx.out_grad_opt(0) else {
            // The attention reaches no loss: nothing flows back.
            for i in 0..3 {
                let z = ctx.b.zeros_like(ctx.input(i))?;
                ctx.set(i, z);
            }
            return Ok(());
        };
        let inputs = [gy, ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(1)];
        let grad = ctx.b.node(self.grad_op().name(), self.grad_op().into(), &inputs)?;
        for i in 0..3 {
            ctx.set(i, Outlet::new(grad, i));
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        // Per head, the scores (Tq x Dk by Dk x Tk), the weighted sum (Tq x Tk by Tk x
        // Dv) and the softmax.
        let count = |f: &Fact| f.shape.num_elements(batch) as u64;
        let tk = outputs[1].shape.dims().last().and_then(|d| d.known()).unwrap_or(0) as u64;
        2 * tk * (count(&inputs[0]) + count(&outputs[0])) + 5 * count(&outputs[1])
    }
    fn is_pure(&self) -> bool {
        // A dropout draws a new mask each step.
        self.dropout.is_none()
    }
}

impl GraphBuilder<'_> {
    /// The fused attention of projections `q`, `k` and `v` over `heads`; returns the node,
    /// whose outputs are `(attention, weights)`.
    pub fn fused_attention(&mut self, op: FusedAttention, q: Outlet, k: Outlet, v: Outlet) -> Result<NodeId> {
        self.node(op.name(), op.into(), &[q, k, v])
    }
}
