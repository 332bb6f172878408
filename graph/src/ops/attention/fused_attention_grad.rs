//! The backward of [`FusedAttention`](super::FusedAttention) through its attention output.

use super::FusedAttention;
use crate::{
    DType, Fact,
    ops::{Arity, Dropout, OpDef},
};

/// Inputs: `(dy, q, k, v, weights)`, the weights the forward op output (before dropout).
/// Outputs: `(dq, dk, dv)`. With `P` the weights, `M` the dropout's mask and `S` the
/// scaled scores, per head: `dV = (P∘M)^T dy`, `dP = (dy V^T)∘M`, `dS = P∘(dP −
/// rowsum(dP∘P))`, `dQ = scale · dS K` and `dK = scale · dS^T Q`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedAttentionGrad {
    pub heads: usize,
    pub scale: f32,
    pub dropout: Option<Dropout>,
}

impl OpDef for FusedAttentionGrad {
    fn name(&self) -> &'static str {
        "FusedAttentionGrad"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(5)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (dy, q, k, v, w) = (&inputs[0], &inputs[1], &inputs[2], &inputs[3], &inputs[4]);
        let forward = FusedAttention { heads: self.heads, scale: self.scale, dropout: None };
        let facts = forward.infer(&[q.clone(), k.clone(), v.clone()])?;
        if dy != &facts[0] {
            return Err(format!("gradient {} must match the attention {}", dy.shape, facts[0].shape));
        }
        if w.dtype != DType::F32 || w.shape != facts[1].shape {
            return Err(format!("weights {} must be f32 of shape {}", w.shape, facts[1].shape));
        }
        Ok(vec![q.clone(), k.clone(), v.clone()])
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        // Four products per head (dV, dP, dQ, dK) and the softmax's backward.
        let count = |f: &Fact| f.shape.num_elements(batch) as u64;
        let tk = inputs[4].shape.dims().last().and_then(|d| d.known()).unwrap_or(0) as u64;
        2 * tk * (2 * count(&inputs[0]) + 2 * count(&inputs[1])) + 6 * count(&inputs[4])
    }
    fn is_pure(&self) -> bool {
        self.dropout.is_none()
    }
}
