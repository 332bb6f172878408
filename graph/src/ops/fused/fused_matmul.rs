//! `activation(matmul(a, b) + bias)` in one op.

use super::FusedActivation;
use crate::{
    Fact,
    ops::{Arity, MatMul, OpDef},
};

/// Inputs: `(a, b, bias [columns])`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedMatMul {
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub activation: FusedActivation,
}

impl FusedMatMul {
    pub fn matmul(&self) -> MatMul {
        MatMul { transpose_a: self.transpose_a, transpose_b: self.transpose_b }
    }
}

impl OpDef for FusedMatMul {
    fn name(&self) -> &'static str {
        "_FusedMatMul"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let out = self.matmul().infer(&inputs[..2])?;
        let cols = out[0].shape.dims().last().copied();
        if inputs[2].rank() != 1 || inputs[2].shape.dims().first().copied() != cols {
            return Err(format!("bias {} does not match the {} output columns", inputs[2].shape, out[0].shape));
        }
        Ok(out)
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        self.matmul().flops(&inputs[..2], outputs, batch) + 2 * outputs[0].shape.num_elements(batch) as u64
    }
}
