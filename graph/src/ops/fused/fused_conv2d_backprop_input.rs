//! A convolution's input gradient with the ReLU gradient that reads it (and the other
//! gradient summed into it first, at a skip connection) applied as it is written.

use super::{ElementOp, FusedElementwise, Instr, Operand};
use crate::{
    Fact,
    ops::{Arity, Conv2dBackpropInput, OpDef},
};

/// Inputs: `(filter, gradient of the output, y, [addend])`, where `y` is the output of
/// the ReLU that fed the convolution. Equal to `ReluGrad(y, Conv2dBackpropInput(filter,
/// gradient) [+ addend])`.
///
/// Unfused, a backward pass through `relu → conv` writes the input gradient, then reads
/// it back with `y` to write the masked one: two passes over a tensor as large as the
/// activation, and at a skip connection a third input. Fused, the mask (and the sum) are
/// applied to each image's gradient while it is in cache (XLA's output fusion of an
/// elementwise consumer into a convolution).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedConv2dBackpropInput {
    pub input_grad: Conv2dBackpropInput,
    /// Whether a fourth input is added to the gradient before the mask.
    pub addend: bool,
}

impl FusedConv2dBackpropInput {
    /// The epilogue as an elementwise program over `(input gradient, y, [addend])`: what
    /// devices run after the convolution, and the rule the CPU's fused loop keeps.
    pub fn epilogue(&self) -> FusedElementwise {
        let relu_grad = |dy| Instr { op: ElementOp::ReluGrad, args: [Operand::Input(1), dy] };
        if self.addend {
            let sum = Instr { op: ElementOp::Add, args: [Operand::Input(0), Operand::Input(2)] };
            FusedElementwise::new(vec![sum, relu_grad(Operand::Temp(0))], 3)
        } else {
            FusedElementwise::new(vec![relu_grad(Operand::Input(0))], 2)
        }
    }
}

impl OpDef for FusedConv2dBackpropInput {
    fn name(&self) -> &'static str {
        "_FusedConv2DBackpropInput"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(if self.addend { 4 } else { 3 })
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let out = self.input_grad.infer(&inputs[..2])?;
        for (fact, what) in inputs[2..].iter().zip(["the ReLU's output", "addend"]) {
            if fact.shape != out[0].shape || fact.dtype != out[0].dtype {
                return Err(format!("{what} {} differs from the input gradient {}", fact.shape, out[0].shape));
            }
        }
        Ok(out)
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        let per_value = if self.addend { 2 } else { 1 };
        self.input_grad.flops(&inputs[..2], outputs, batch) + per_value * outputs[0].shape.num_elements(batch) as u64
    }
}
