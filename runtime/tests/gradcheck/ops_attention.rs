//! The fused attention op, with and without dropout on its weights, self- and
//! cross-attention shapes (Tq ≠ Tk, Dk ≠ Dv): the backward op's kernels (native and
//! generic) against finite differences of the forward kernels.

use crate::harness::{check, input};
use anyhow::Result;
use engine_graph::{
    Outlet,
    ops::{Dropout, FusedAttention},
};

/// `(examples, heads, tq, tk, dk, dv)`.
const SHAPES: [(usize, usize, usize, usize, usize, usize); 3] =
    [(2, 1, 3, 3, 2, 2), (2, 2, 3, 4, 3, 2), (1, 3, 4, 2, 2, 3)];

fn attention(dropout: Option<f32>) -> Result<()> {
    for (n, h, tq, tk, dk, dv) in SHAPES {
        let op = FusedAttention {
            heads: h,
            scale: 1.0 / (dk as f32).sqrt(),
            dropout: dropout.map(|rate| Dropout { rate, seed: 5 }),
        };
        let inputs = [input(&[n, tq, h * dk]), input(&[n, tk, h * dk]), input(&[n, tk, h * dv])];
        check(&inputs, |b, x| Ok(Outlet::new(b.fused_attention(op.clone(), x[0], x[1], x[2])?, 0)))?;
    }
    Ok(())
}

#[test]
fn fused_attention() -> Result<()> {
    attention(None)
}

#[test]
fn fused_attention_with_dropout() -> Result<()> {
    attention(Some(0.4))
}
