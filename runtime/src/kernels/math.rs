//! Matrix product and elementwise arithmetic.

use super::{KernelCtx, align, expand_float};
use crate::{
    Result, Value,
    value::{B, T},
};
use burn::backend::TensorMetadata;
use burn::backend::ops::{FloatTensorOps, IntTensorOps};
use engine_graph::{Op, ops::MatMul};

pub(super) fn matmul(m: &MatMul, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [a, b] = ctx.floats(inputs)?;
    let (ra, rb) = (a.shape().num_dims(), b.shape().num_dims());
    let a = if m.transpose_a { B::float_swap_dims(a, ra - 2, ra - 1) } else { a };
    let b = if m.transpose_b { B::float_swap_dims(b, rb - 2, rb - 1) } else { b };
    Ok(super::autocast::matmul(a, b, ctx))
}

pub(super) fn binary(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    let rank = inputs.iter().map(|v| v.shape().len()).max().unwrap_or(0);
    let mut it = inputs.into_iter().map(|v| align(v, rank));
    let (a, b) =
        (it.next().ok_or_else(|| ctx.err("missing input"))?, it.next().ok_or_else(|| ctx.err("missing input"))?);
    match (a, b) {
        (Value::Float(a), Value::Float(b)) => Ok(Value::Float(match op {
            Op::Add(_) => B::float_add(a, b),
            Op::Sub(_) => B::float_sub(a, b),
            Op::Mul(_) => B::float_mul(a, b),
            Op::Div(_) => B::float_div(a, b),
            Op::Maximum(_) | Op::Minimum(_) => {
                let out = ctx.out_shape(0)?;
                let (a, b) = (expand_float(a, &out), expand_float(b, &out));
                // Ties keep `a`, so gradients routed to `a` on ties agree with the values.
                let b_wins = match op {
                    Op::Maximum(_) => B::float_lower(a.clone(), b.clone(), ctx.bool_dtype()),
                    _ => B::float_greater(a.clone(), b.clone(), ctx.bool_dtype()),
                };
                B::float_mask_where(a, b_wins, b)
            }
            _ => return Err(ctx.err("not a binary op")),
        })),
        (Value::Int(a), Value::Int(b)) => Ok(Value::Int(match op {
            Op::Add(_) => B::int_add(a, b),
            Op::Sub(_) => B::int_sub(a, b),
            Op::Mul(_) => B::int_mul(a, b),
            Op::Div(_) => B::int_div(a, b),
            _ => return Err(ctx.err("this op is not defined on integers")),
        })),
        (a, b) => Err(ctx.err(format!("operand dtypes {:?} and {:?} are not supported", a.dtype(), b.dtype()))),
    }
}

/// `_FusedElementwise` on a cubecl device as one generated kernel, unless
/// `ENGINE_ELEMENTWISE=ops` (the instructions one kernel each, for comparison). It moves a
/// third of the bytes an Adam update moves op by op. It was off by default after a lavapipe
/// census that timed each kernel with a device sync after it and counted its first
/// compilation; the steady step rate, the figure that counts, was measured later on the
/// same lavapipe: MLP 7.61 and 7.92 steps/s against 6.57 and 7.59 op by op, ResNet at batch
/// 16 0.639 and 0.641 against 0.614 and 0.633 (BENCHMARKS.md, "The device kernels").
#[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
fn generated(f: &engine_graph::ops::FusedElementwise, inputs: &[Value], ctx: &KernelCtx<'_>) -> Result<Option<Vec<T>>> {
    if !super::elementwise_kernel::chosen() {
        return Ok(None);
    }
    Ok(super::elementwise_kernel::fused(f, inputs, &ctx.out_shape(0)?))
}

/// Without a cubecl device (or under burn's `fusion`, which generates its own kernels) the
/// instructions run one by one.
#[cfg(not(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion"))))]
fn generated(_: &engine_graph::ops::FusedElementwise, _: &[Value], _: &KernelCtx<'_>) -> Result<Option<Vec<T>>> {
    Ok(None)
}

/// `_FusedElementwise` on any backend: the program's instructions one kernel at a time, or
/// one generated kernel on a cubecl device where chosen. Its outputs, the last
/// instruction's result first, then the side outputs.
pub(super) fn fused_elementwise(
    f: &engine_graph::ops::FusedElementwise,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<Vec<Value>> {
    use engine_graph::ops::{self, ElementOp, Operand};
    if let Some(ts) = generated(f, &inputs, ctx)? {
        return Ok(ts.into_iter().map(Value::Float).collect());
    }
    let mut temps: Vec<Value> = Vec::with_capacity(f.program.len());
    for ins in &f.program {
        let arg = |o: Operand| {
            match o {
                Operand::Input(k) => inputs.get(k).cloned(),
                Operand::Temp(t) => temps.get(t).cloned(),
            }
            .ok_or_else(|| ctx.err("fused elementwise operand out of range"))
        };
        let a = arg(ins.args[0])?;
        let value = if matches!(ins.op, ElementOp::Relu | ElementOp::ReluGrad) {
            let (op, args) = match ins.op {
                ElementOp::Relu => (Op::Relu(ops::Relu), vec![a]),
                _ => (Op::ReluGrad(ops::ReluGrad), vec![a, arg(ins.args[1])?]),
            };
            Value::Float(super::activation::run(&op, args, ctx)?)
        } else if ins.op.arity() == 1 {
            let op = match ins.op {
                ElementOp::Neg => Op::Neg(ops::Neg),
                ElementOp::Exp => Op::Exp(ops::Exp),
                ElementOp::Log => Op::Log(ops::Log),
                ElementOp::Sqrt => Op::Sqrt(ops::Sqrt),
                _ => Op::Square(ops::Square),
            };
            Value::Float(unary(&op, vec![a], ctx)?)
        } else {
            let op = match ins.op {
                ElementOp::Add => Op::Add(ops::Add),
                ElementOp::Sub => Op::Sub(ops::Sub),
                ElementOp::Mul => Op::Mul(ops::Mul),
                ElementOp::Div => Op::Div(ops::Div),
                ElementOp::Maximum => Op::Maximum(ops::Maximum),
                _ => Op::Minimum(ops::Minimum),
            };
            binary(&op, vec![a, arg(ins.args[1])?], ctx)?
        };
        temps.push(value);
    }
    let shape = ctx.out_shape(0)?;
    f.output_temps()
        .map(|t| {
            let out = temps.get(t).cloned().ok_or_else(|| ctx.err("empty fused elementwise program"))?;
            // A program of single-element inputs broadcasts to the output's shape.
            Ok(match out {
                Value::Float(t) => Value::Float(super::expand_float(t, &shape)),
                other => other,
            })
        })
        .collect()
}

pub(super) fn add_n(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let mut it = inputs.into_iter();
    let mut acc = ctx.float(it.next().ok_or_else(|| ctx.err("AddN needs an input"))?)?;
    for v in it {
        acc = B::float_add(acc, ctx.float(v)?);
    }
    Ok(acc)
}

pub(super) fn unary(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [x] = ctx.floats(inputs)?;
    Ok(match op {
        Op::Neg(_) => B::float_neg(x),
        Op::Exp(_) => B::float_exp(x),
        Op::Log(_) => B::float_log(x),
        Op::Sqrt(_) => B::float_sqrt(x),
        Op::Square(_) => B::float_mul(x.clone(), x),
        Op::Cos(_) => B::float_cos(x),
        Op::Sin(_) => B::float_sin(x),
        Op::Erf(_) => B::float_erf(x),
        _ => return Err(ctx.err("not a unary op")),
    })
}
