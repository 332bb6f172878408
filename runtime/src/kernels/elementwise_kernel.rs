//! `_FusedElementwise` as one generated cubecl kernel: the program is compiled into the
//! kernel, so its inputs are read once, its intermediates stay in registers and its result
//! is written once.
//!
//! Why: run op by op, a fused program is as many kernels as instructions, each reading and
//! writing a tensor of the output's size (an SGD step with momentum, three per variable;
//! Adam's moments and update, nine). On a GPU that is memory traffic the fusion pass
//! meant to remove; under a step graph the launches cost little, the traffic does not.
//! XLA and inductor generate such loops per fusion for the same reason.

use crate::Value;
use crate::device::cube::{empty_contiguous, float_buffer, float_tensor, launched};
use crate::value::T;
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, ir::AddressType};
use engine_graph::ops::{ElementOp, FusedElementwise, Operand};

/// The input slots the kernel has; a program with more inputs runs op by op.
const MOST_INPUTS: usize = 6;

/// The program's result of `out_shape`, or `None` where the kernel does not apply (a
/// value not in a cubecl float buffer, inputs of different types, an input neither of the
/// output's size and contiguous nor a single element, more than [`MOST_INPUTS`] inputs, a
/// refused launch): the caller then runs the instructions one by one.
pub(super) fn fused(f: &FusedElementwise, inputs: &[Value], out_shape: &[usize]) -> Option<T> {
    let total: usize = out_shape.iter().product();
    if inputs.is_empty() || inputs.len() > MOST_INPUTS || total == 0 {
        return None;
    }
    let mut cubes = Vec::with_capacity(inputs.len());
    let mut scalar = Vec::with_capacity(inputs.len());
    for v in inputs {
        let Value::Float(t) = v else { return None };
        let (c, elem) = float_buffer(t)?;
        let elements: usize = c.meta.shape().iter().product();
        if elements == 1 {
            scalar.push(true);
        } else if elements == total && c.is_contiguous() {
            scalar.push(false);
        } else {
            return None;
        }
        cubes.push((c, elem));
    }
    let (first, elem) = cubes[0];
    if cubes.iter().any(|(c, _)| c.dtype != first.dtype) {
        return None;
    }
    let code = compile(f)?;
    let client = first.client.clone();
    let out = empty_contiguous(first, out_shape.to_vec());
    let slot = |k: usize| cubes.get(k).map_or(first, |c| c.0).clone().into_tensor_arg();
    let cube_dim = CubeDim::new(&client, total);
    let cube_count = calculate_cube_count_elemwise(&client, total, cube_dim);
    let most = cubes.iter().map(|(c, _)| c.handle.size() as usize / c.dtype.size()).max().unwrap_or(0);
    let address = AddressType::from_len(total.max(most));
    let ok = launched(|| unsafe {
        elementwise_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            address,
            slot(0),
            slot(1),
            slot(2),
            slot(3),
            slot(4),
            slot(5),
            out.clone().into_tensor_arg(),
            total,
            scalar,
            code,
            elem,
        )
    });
    ok.then(|| float_tensor(out))
}

/// Three numbers per instruction: the op's code and its two operands as registers, the
/// inputs first (`0..inputs`), then each instruction's result in order. `None` for an
/// operand out of range (the op-by-op path names it).
fn compile(f: &FusedElementwise) -> Option<Vec<u32>> {
    let mut code = Vec::with_capacity(3 * f.program.len());
    for (i, ins) in f.program.iter().enumerate() {
        let register = |o: Operand| -> Option<u32> {
            let r = match o {
                Operand::Input(k) if k < f.inputs => k,
                Operand::Temp(t) if t < i => f.inputs + t,
                _ => return None,
            };
            u32::try_from(r).ok()
        };
        let b = if ins.op.arity() == 2 { register(ins.args[1])? } else { 0 };
        code.extend([op_code(ins.op), register(ins.args[0])?, b]);
    }
    Some(code)
}

fn op_code(op: ElementOp) -> u32 {
    match op {
        ElementOp::Add => 0,
        ElementOp::Sub => 1,
        ElementOp::Mul => 2,
        ElementOp::Div => 3,
        ElementOp::Maximum => 4,
        ElementOp::Minimum => 5,
        ElementOp::Neg => 6,
        ElementOp::Exp => 7,
        ElementOp::Log => 8,
        ElementOp::Sqrt => 9,
        ElementOp::Square => 10,
        ElementOp::Relu => 11,
        ElementOp::ReluGrad => 12,
    }
}

/// One output value per thread. `scalar[k]` says input `k` is a single element (read at
/// 0); the slots past the program's inputs repeat the first and are never read. Each op
/// keeps the unfused kernel's rule: `Maximum`/`Minimum` keep `a` on ties and where
/// either is NaN, `Relu` is zero for NaN, `ReluGrad(y, dy)` is `dy` where `y > 0`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked, address_type = "dynamic")]
fn elementwise_kernel<E: Float>(
    in0: &Tensor<E>,
    in1: &Tensor<E>,
    in2: &Tensor<E>,
    in3: &Tensor<E>,
    in4: &Tensor<E>,
    in5: &Tensor<E>,
    out: &mut Tensor<E>,
    total: usize,
    #[comptime] scalar: Vec<bool>,
    #[comptime] code: Vec<u32>,
    #[define(E)] _elem: ElemType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= total {
        terminate!();
    }
    let inputs = comptime!(scalar.len());
    let mut regs = Sequence::<E>::new();
    if comptime!(inputs > 0) {
        regs.push(load(in0, pos, comptime!(scalar[0])));
    }
    if comptime!(inputs > 1) {
        regs.push(load(in1, pos, comptime!(scalar[1])));
    }
    if comptime!(inputs > 2) {
        regs.push(load(in2, pos, comptime!(scalar[2])));
    }
    if comptime!(inputs > 3) {
        regs.push(load(in3, pos, comptime!(scalar[3])));
    }
    if comptime!(inputs > 4) {
        regs.push(load(in4, pos, comptime!(scalar[4])));
    }
    if comptime!(inputs > 5) {
        regs.push(load(in5, pos, comptime!(scalar[5])));
    }
    let steps = comptime!(code.len() / 3);
    let zero = E::from_int(0);
    #[unroll]
    for i in 0..steps {
        let op = comptime!(code[3 * i]);
        let a = *regs.index(comptime!(code[3 * i + 1] as usize));
        let b = *regs.index(comptime!(code[3 * i + 2] as usize));
        let mut r = a;
        if comptime!(op == 0) {
            r = a + b;
        } else if comptime!(op == 1) {
            r = a - b;
        } else if comptime!(op == 2) {
            r = a * b;
        } else if comptime!(op == 3) {
            r = a / b;
        } else if comptime!(op == 4) {
            r = select(a < b, b, a);
        } else if comptime!(op == 5) {
            r = select(a > b, b, a);
        } else if comptime!(op == 6) {
            r = -a;
        } else if comptime!(op == 7) {
            r = E::exp(a);
        } else if comptime!(op == 8) {
            r = E::ln(a);
        } else if comptime!(op == 9) {
            r = E::sqrt(a);
        } else if comptime!(op == 10) {
            r = a * a;
        } else if comptime!(op == 11) {
            r = select(a > zero, a, zero);
        } else if comptime!(op == 12) {
            r = select(a > zero, b, zero);
        }
        regs.push(r);
    }
    out[pos] = *regs.index(comptime!(inputs + steps - 1));
}

#[cube]
fn load<E: Float>(t: &Tensor<E>, pos: usize, #[comptime] scalar: bool) -> E {
    let mut at = pos;
    if scalar {
        at = 0;
    }
    t[at]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Precision;
    use crate::value::{B, float_from_f64};
    use burn::backend::ops::FloatTensorOps;
    use burn::backend::{DispatchDevice, FlexDevice};
    use engine_graph::ops::Instr;

    fn values(t: T) -> Vec<f64> {
        let data = burn::backend::read_sync(B::float_into_data(t)).unwrap();
        data.convert::<f64>().try_into_vec::<f64>().unwrap()
    }

    fn ins(op: ElementOp, a: Operand, b: Operand) -> Instr {
        Instr { op, args: [a, b] }
    }

    /// The program on the host, op by op, with the unfused kernels' rules.
    fn reference(f: &FusedElementwise, inputs: &[Vec<f64>], n: usize) -> Vec<f64> {
        (0..n)
            .map(|p| {
                let mut regs: Vec<f32> =
                    inputs.iter().map(|v| if v.len() == 1 { v[0] as f32 } else { v[p] as f32 }).collect();
                for ins in &f.program {
                    let reg = |o: Operand| match o {
                        Operand::Input(k) => k,
                        Operand::Temp(t) => f.inputs + t,
                    };
                    let (a, b) = (regs[reg(ins.args[0])], regs[reg(ins.args[1])]);
                    regs.push(match ins.op {
                        ElementOp::Add => a + b,
                        ElementOp::Sub => a - b,
                        ElementOp::Mul => a * b,
                        ElementOp::Div => a / b,
                        ElementOp::Maximum => {
                            if a < b {
                                b
                            } else {
                                a
                            }
                        }
                        ElementOp::Minimum => {
                            if a > b {
                                b
                            } else {
                                a
                            }
                        }
                        ElementOp::Neg => -a,
                        ElementOp::Exp => a.exp(),
                        ElementOp::Log => a.ln(),
                        ElementOp::Sqrt => a.sqrt(),
                        ElementOp::Square => a * a,
                        ElementOp::Relu => {
                            if a > 0.0 {
                                a
                            } else {
                                0.0
                            }
                        }
                        ElementOp::ReluGrad => {
                            if a > 0.0 {
                                b
                            } else {
                                0.0
                            }
                        }
                    });
                }
                f64::from(*regs.last().unwrap())
            })
            .collect()
    }

    /// Every op, operands from inputs and from earlier results, a single-element input
    /// broadcast, NaN through ReLU, and an Adam-shaped update: the generated kernel equals
    /// the host's evaluation on every device named in `ENGINE_TEST_DEVICES`, and a value on
    /// flex is left to the ops.
    #[test]
    fn generated_programs_equal_the_ops_one_by_one() {
        use ElementOp::*;
        use Operand::{Input as I, Temp as Tm};
        let n = 1000;
        let x: Vec<f64> = (0..n).map(|i| ((i * 37 % 101) as f64 - 50.0) / 10.0).collect();
        let mut y: Vec<f64> = (0..n).map(|i| ((i * 53 % 97) as f64 + 1.0) / 20.0).collect();
        y[7] = f64::NAN;
        let programs = [
            // Every binary op, then every unary op on positive values.
            FusedElementwise {
                inputs: 3,
                program: vec![
                    ins(Add, I(0), I(2)),
                    ins(Sub, Tm(0), I(1)),
                    ins(Mul, Tm(1), I(2)),
                    ins(Div, Tm(2), I(1)),
                    ins(Maximum, Tm(3), I(0)),
                    ins(Minimum, Tm(4), I(1)),
                    ins(Square, Tm(5), Tm(5)),
                    ins(Sqrt, Tm(6), Tm(6)),
                    ins(Exp, Tm(7), Tm(7)),
                    ins(Log, Tm(8), Tm(8)),
                    ins(Neg, Tm(9), Tm(9)),
                    ins(Relu, Tm(10), Tm(10)),
                    ins(ReluGrad, I(0), Tm(11)),
                    ins(Add, Tm(12), Tm(11)),
                ],
            },
            // Adam's update: var - lr * m / (sqrt(v) + eps), lr and eps single elements.
            FusedElementwise {
                inputs: 5,
                program: vec![
                    ins(Sqrt, I(2), I(2)),
                    ins(Add, Tm(0), I(4)),
                    ins(Div, I(1), Tm(1)),
                    ins(Mul, I(3), Tm(2)),
                    ins(Sub, I(0), Tm(3)),
                ],
            },
            // ReLU of a NaN is zero; a residual's skip add then ReLU.
            FusedElementwise { inputs: 2, program: vec![ins(Add, I(0), I(1)), ins(Relu, Tm(0), Tm(0))] },
        ];
        let flex = DispatchDevice::Flex(FlexDevice);
        let host =
            |d: &[f64], dev: &DispatchDevice| Value::Float(float_from_f64(&[d.len()], d.to_vec(), dev, Precision::F32));
        for (name, device) in crate::device::test_devices() {
            for f in &programs {
                let data: Vec<Vec<f64>> = match f.inputs {
                    3 => vec![x.clone(), y.iter().map(|v| if v.is_nan() { 1.0 } else { *v }).collect(), vec![0.5]],
                    5 => vec![
                        x.clone(),
                        x.clone(),
                        y.iter().map(|v| if v.is_nan() { 1.0 } else { *v }).collect(),
                        vec![0.01],
                        vec![1e-7],
                    ],
                    _ => vec![x.clone(), y.clone()],
                };
                let on = |dev: &DispatchDevice| data.iter().map(|d| host(d, dev)).collect::<Vec<_>>();
                assert!(fused(f, &on(&flex), &[n]).is_none(), "flex");
                let got = values(fused(f, &on(&device), &[n]).unwrap_or_else(|| panic!("{name}: {f}")));
                let want = reference(f, &data, n);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    let close = (a - b).abs() <= 1e-5 * (1.0 + b.abs()) || (a.is_nan() && b.is_nan());
                    assert!(close, "{name}: {f}: [{i}] {a} against {b}");
                }
            }
        }
    }
}
