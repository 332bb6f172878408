//! A tree of elementwise float ops evaluated in one pass over memory.
//!
//! An optimizer's update is a handful of elementwise ops per variable (SGD: `var - lr *
//! g`; Adam: nine), each reading and writing a variable-sized tensor; fused, the tensors
//! are read once and the result written once, the intermediates staying in registers.

use crate::{
    DType, Fact,
    ops::{Arity, OpDef},
};
use std::fmt;

/// The elementwise ops a fusion may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ElementOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    Neg,
    Exp,
    Log,
    Sqrt,
    Square,
    /// `max(x, 0)`, zero for NaN as the unfused kernel.
    Relu,
    /// `ReluGrad(y, dy)`: `dy` where `y > 0`, else zero.
    ReluGrad,
}

impl ElementOp {
    pub fn arity(self) -> usize {
        match self {
            ElementOp::Add
            | ElementOp::Sub
            | ElementOp::Mul
            | ElementOp::Div
            | ElementOp::Maximum
            | ElementOp::Minimum
            | ElementOp::ReluGrad => 2,
            _ => 1,
        }
    }
}

/// An operand: one of the op's inputs, or the result of an earlier instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Operand {
    Input(usize),
    Temp(usize),
}

/// `Temp(i)` is instruction `i`'s result; unary ops ignore `args[1]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Instr {
    pub op: ElementOp,
    pub args: [Operand; 2],
}

/// Inputs: tensors of the output's shape, or single-element tensors broadcast over it.
/// Output 0 is the last instruction's result; outputs 1.. are the instructions that
/// `side_outputs` names, in its order (a multi-output fusion: an optimizer's moment is
/// assigned and also read by the variable's update, so both leave the same pass).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedElementwise {
    pub program: Vec<Instr>,
    pub inputs: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_outputs: Vec<usize>,
}

impl FusedElementwise {
    /// One output, the last instruction's.
    pub fn new(program: Vec<Instr>, inputs: usize) -> Self {
        FusedElementwise { program, inputs, side_outputs: Vec::new() }
    }

    /// The instruction whose result each output is, output 0 first.
    pub fn output_temps(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.program.len().saturating_sub(1)).chain(self.side_outputs.iter().copied())
    }

    /// Whether every operand refers to an input or an earlier instruction, and every side
    /// output to an instruction other than the last (output 0 already is).
    fn well_formed(&self) -> bool {
        !self.program.is_empty()
            && self.program.iter().enumerate().all(|(i, ins)| {
                ins.args[..ins.op.arity()].iter().all(|a| match a {
                    Operand::Input(k) => *k < self.inputs,
                    Operand::Temp(t) => *t < i,
                })
            })
            && self.side_outputs.iter().all(|&t| t + 1 < self.program.len())
    }
}

impl fmt::Display for FusedElementwise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |a: &Operand| match a {
            Operand::Input(k) => format!("in{k}"),
            Operand::Temp(t) => format!("t{t}"),
        };
        for (i, ins) in self.program.iter().enumerate() {
            let args: Vec<String> = ins.args[..ins.op.arity()].iter().map(name).collect();
            write!(f, "{}t{i} = {:?}({})", if i > 0 { "; " } else { "" }, ins.op, args.join(", "))?;
        }
        if !self.side_outputs.is_empty() {
            let temps: Vec<String> = self.side_outputs.iter().map(|t| format!("t{t}")).collect();
            write!(f, "; also {}", temps.join(", "))?;
        }
        Ok(())
    }
}

impl OpDef for FusedElementwise {
    fn name(&self) -> &'static str {
        "_FusedElementwise"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(self.inputs)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        if !self.well_formed() {
            return Err(format!("malformed program: {self}"));
        }
        let full = inputs.iter().find(|f| !is_single(f)).ok_or("every input is a single element")?;
        for (i, f) in inputs.iter().enumerate() {
            if f.dtype != DType::F32 {
                return Err(format!("input {i} must be f32, found {}", f.dtype));
            }
            if !is_single(f) && f.shape != full.shape {
                return Err(format!("input {i} {} is neither {} nor a single element", f.shape, full.shape));
            }
        }
        Ok(vec![full.clone(); 1 + self.side_outputs.len()])
    }
    fn flops(&self, _inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        (self.program.len() * outputs[0].shape.num_elements(batch)) as u64
    }
}

/// A tensor of one element (a scalar or all dimensions 1), broadcast over any shape.
pub fn is_single(f: &Fact) -> bool {
    f.shape.dims().iter().all(|d| d.known() == Some(1))
}
