//! `_FusedElementwise` as one generated cubecl kernel: the program is compiled into the
//! kernel, so its inputs are read once, its intermediates stay in registers and its result
//! is written once.
//!
//! Why: run op by op, a fused program is as many kernels as instructions, each reading and
//! writing a tensor of the output's size (an SGD step with momentum, three per variable;
//! Adam's moments and update, nine). On a GPU that is memory traffic the fusion pass
//! meant to remove; under a step graph the launches cost little, the traffic does not.
//! XLA and inductor generate such loops per fusion for the same reason.

use super::ins;
use crate::Value;
use crate::device::cube::{Cube, empty_contiguous, float_buffer, float_tensor, launched};
use crate::value::T;
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, ir::AddressType};
use engine_graph::ops::{ElementOp, FusedElementwise, Instr, Operand};

/// Whether programs run as generated kernels: `ENGINE_ELEMENTWISE=ops` runs them one op
/// per kernel instead, for comparison.
pub(super) fn chosen() -> bool {
    static GENERATED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GENERATED.get_or_init(|| !std::env::var("ENGINE_ELEMENTWISE").is_ok_and(|v| v == "ops"))
}

/// The input slots the kernel has: read as vectors (full-size inputs and rows) and as
/// elements (single elements and columns). cubecl 0.11's tensors are unsized, so a kernel
/// cannot take a sequence of them, and each slot is an argument. A program with more
/// inputs of either kind runs op by op.
const WIDE_SLOTS: usize = 8;
const SINGLE_SLOTS: usize = 8;
/// The output slots: output 0 and up to three side outputs (a multi-output fusion's,
/// `engine_graph::passes::MergeElementwise`, which merges no further than these slots).
/// A slot past the program's outputs is bound to output 0's buffer and never written.
const OUT_SLOTS: usize = 4;

/// How an input is read, as the kernel's comptime code for it: an element per output
/// element, one element for all, a row of the output's last axis for every row (a bias,
/// batch normalization's statistics), or one element per row (layer normalization's).
const FULL: u32 = 0;
const SINGLE: u32 = 1;
const ROW: u32 = 2;
const COLUMN: u32 = 3;

/// The program's outputs of `out_shape` (the last instruction's result, then the side
/// outputs), or `None` where the kernel does not apply (a value not in a cubecl float
/// buffer, inputs of different types, an input that is neither of the output's size nor a
/// single element nor a row or column of it, a strided one, more inputs or outputs than the
/// slots, a refused launch): the caller then runs the instructions one by one.
pub(super) fn fused(f: &FusedElementwise, inputs: &[Value], out_shape: &[usize]) -> Option<Vec<T>> {
    let total: usize = out_shape.iter().product();
    let outputs: Vec<usize> = f.output_temps().collect();
    if inputs.is_empty() || inputs.len() != f.inputs || total == 0 || outputs.len() > OUT_SLOTS {
        return None;
    }
    let last = out_shape.last().copied().unwrap_or(1);
    let mut wide = Vec::with_capacity(inputs.len());
    let mut single = Vec::new();
    // Per input: how it is read, and its place among its kind's slots.
    let mut kind = Vec::with_capacity(inputs.len());
    let mut slot = Vec::with_capacity(inputs.len());
    let mut rows = false;
    let mut elem = None;
    for v in inputs {
        let Value::Float(t) = v else { return None };
        let (c, e) = float_buffer(t)?;
        if elem.is_some_and(|first| first != e) {
            return None;
        }
        elem = Some(e);
        let elements: usize = c.meta.shape().iter().product();
        let k = match elements {
            1 => SINGLE,
            _ if !c.is_contiguous() => return None,
            n if n == total => FULL,
            n if n == last && c.meta.shape().last() == Some(&last) => ROW,
            n if n * last == total && c.meta.shape().last() == Some(&1) => COLUMN,
            _ => return None,
        };
        rows |= k == ROW || k == COLUMN;
        kind.push(k);
        if k == SINGLE || k == COLUMN {
            slot.push(single.len() as u32);
            single.push(c);
        } else {
            slot.push(wide.len() as u32);
            wide.push(c);
        }
    }
    let (elem, first) = (elem?, *wide.first().or(single.first())?);
    let client = first.client.clone();
    if wide.len() > WIDE_SLOTS
        || single.len() > SINGLE_SLOTS
        || WIDE_SLOTS + SINGLE_SLOTS + OUT_SLOTS > client.properties().hardware.max_bindings as usize
    {
        return None;
    }
    let code = compile(f)?;
    let registers: Vec<u32> = outputs.iter().map(|t| u32::try_from(f.inputs + t).ok()).collect::<Option<_>>()?;
    let outs: Vec<Cube> = outputs.iter().map(|_| empty_contiguous(first, out_shape.to_vec())).collect();
    let out = |j: usize| outs.get(j).unwrap_or(&outs[0]).clone().into_tensor_arg();
    let elem_size = first.dtype.size();
    let row = if rows { last } else { total };
    let width = vector_width(client.io_optimized_vector_sizes(elem_size), elem_size, row, &wide);
    let units = total / width;
    let cube_dim = CubeDim::new(&client, units);
    let cube_count = calculate_cube_count_elemwise(&client, units, cube_dim);
    let most = wide.iter().chain(&single).map(|c| c.handle.size() as usize / c.dtype.size()).max().unwrap_or(0);
    let address = AddressType::from_len(total.max(most));
    // Slots past an input kind's count repeat a bound buffer and are never read.
    let w = |k: usize| (*wide.get(k).unwrap_or(&first)).clone().into_tensor_arg();
    let s = |k: usize| (*single.get(k).or(wide.first()).unwrap_or(&first)).clone().into_tensor_arg();
    let ok = launched(|| unsafe {
        elementwise_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            address,
            width,
            w(0),
            w(1),
            w(2),
            w(3),
            w(4),
            w(5),
            w(6),
            w(7),
            s(0),
            s(1),
            s(2),
            s(3),
            s(4),
            s(5),
            s(6),
            s(7),
            out(0),
            out(1),
            out(2),
            out(3),
            units,
            row / width,
            kind,
            slot,
            code,
            registers,
            elem,
        )
    });
    ok.then(|| outs.into_iter().map(float_tensor).collect())
}

/// `activation(y + bias + skip)`, the bias a row of `y`'s last axis, as one kernel: a
/// fused convolution's or dense layer's epilogue, which burn's ops run as two or three
/// passes over the output (the add, the skip's add, the ReLU). `None` where the kernel
/// does not apply, as for [`fused`].
pub(super) fn epilogue(y: &T, bias: &T, skip: Option<&T>, relu: bool) -> Option<T> {
    use Operand::{Input, Temp};
    let shape = float_buffer(y)?.0.meta.shape().to_vec();
    let mut inputs = vec![y, bias];
    let mut code = vec![ins(ElementOp::Add, Input(0), Input(1))];
    if let Some(s) = skip {
        inputs.push(s);
        code.push(ins(ElementOp::Add, Temp(0), Input(2)));
    }
    if relu {
        let last = Temp(code.len() - 1);
        code.push(ins(ElementOp::Relu, last, last));
    }
    program(code, &inputs, &shape)
}

/// `code` over `inputs` as one kernel, for a kernel of this crate built from elementwise
/// steps (normalization's); `None` as for [`fused`].
pub(super) fn program(code: Vec<Instr>, inputs: &[&T], out_shape: &[usize]) -> Option<T> {
    let values: Vec<Value> = inputs.iter().map(|t| Value::Float((*t).clone())).collect();
    fused(&FusedElementwise::new(code, values.len()), &values, out_shape)?.pop()
}

/// How many neighbouring elements one thread computes: the widest of the device's
/// preferred load widths that divides `row` (the output, or its last axis where a row is
/// read: a thread's elements then lie in one row) and that every full-size or row input's
/// start is aligned to. Burn's own elementwise kernels read four floats per thread the same way;
/// one per thread made the generated kernel slower than the ops it replaces on lavapipe.
fn vector_width(preferred: impl Iterator<Item = usize>, elem_size: usize, row: usize, wide: &[&Cube]) -> usize {
    preferred
        .filter(|&w| {
            // With no full-size input, the wide slots hold a single element.
            (w == 1 || !wide.is_empty())
                && row.is_multiple_of(w)
                && wide.iter().all(|c| (c.handle.offset_start.unwrap_or(0) as usize).is_multiple_of(w * elem_size))
        })
        .max()
        .unwrap_or(1)
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

/// `N` neighbouring output values per thread, into `out` and the side outputs `out1..`
/// (register `outs[j]` into output `j`; `outs` says how many are written). Input `k` is read as `kind[k]` says: from
/// wide slot `slot[k]` at the thread's place (`FULL`) or at its place in the row (`ROW`,
/// rows of `row_units` vectors), or from single slot `slot[k]`, at 0 (`SINGLE`) or at the
/// thread's row (`COLUMN`), broadcast to every lane. Each op keeps the unfused kernel's rule: `Maximum`/`Minimum` keep `a`
/// on ties and where either is NaN, `Relu` is zero for NaN, `ReluGrad(y, dy)` is `dy`
/// where `y > 0`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked, address_type = "dynamic")]
fn elementwise_kernel<E: Float, N: Size>(
    w0: &Tensor<Vector<E, N>>,
    w1: &Tensor<Vector<E, N>>,
    w2: &Tensor<Vector<E, N>>,
    w3: &Tensor<Vector<E, N>>,
    w4: &Tensor<Vector<E, N>>,
    w5: &Tensor<Vector<E, N>>,
    w6: &Tensor<Vector<E, N>>,
    w7: &Tensor<Vector<E, N>>,
    s0: &Tensor<E>,
    s1: &Tensor<E>,
    s2: &Tensor<E>,
    s3: &Tensor<E>,
    s4: &Tensor<E>,
    s5: &Tensor<E>,
    s6: &Tensor<E>,
    s7: &Tensor<E>,
    out: &mut Tensor<Vector<E, N>>,
    out1: &mut Tensor<Vector<E, N>>,
    out2: &mut Tensor<Vector<E, N>>,
    out3: &mut Tensor<Vector<E, N>>,
    units: usize,
    row_units: usize,
    #[comptime] kind: Vec<u32>,
    #[comptime] slot: Vec<u32>,
    #[comptime] code: Vec<u32>,
    #[comptime] outs: Vec<u32>,
    #[define(E)] _elem: ElemType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= units {
        terminate!();
    }
    let inputs = comptime!(kind.len());
    let mut regs = Sequence::<Vector<E, N>>::new();
    #[unroll]
    for k in 0..inputs {
        let at = comptime!(slot[k]);
        if comptime!(kind[k] == SINGLE || kind[k] == COLUMN) {
            let mut i = 0;
            if comptime!(kind[k] == COLUMN) {
                i = pos / row_units;
            }
            // One branch per slot, so only the input's own slot is loaded.
            if comptime!(at == 0) {
                regs.push(Vector::new(s0[i]));
            } else if comptime!(at == 1) {
                regs.push(Vector::new(s1[i]));
            } else if comptime!(at == 2) {
                regs.push(Vector::new(s2[i]));
            } else if comptime!(at == 3) {
                regs.push(Vector::new(s3[i]));
            } else if comptime!(at == 4) {
                regs.push(Vector::new(s4[i]));
            } else if comptime!(at == 5) {
                regs.push(Vector::new(s5[i]));
            } else if comptime!(at == 6) {
                regs.push(Vector::new(s6[i]));
            } else {
                regs.push(Vector::new(s7[i]));
            }
        } else {
            let mut i = pos;
            if comptime!(kind[k] == ROW) {
                i = pos % row_units;
            }
            if comptime!(at == 0) {
                regs.push(w0[i]);
            } else if comptime!(at == 1) {
                regs.push(w1[i]);
            } else if comptime!(at == 2) {
                regs.push(w2[i]);
            } else if comptime!(at == 3) {
                regs.push(w3[i]);
            } else if comptime!(at == 4) {
                regs.push(w4[i]);
            } else if comptime!(at == 5) {
                regs.push(w5[i]);
            } else if comptime!(at == 6) {
                regs.push(w6[i]);
            } else {
                regs.push(w7[i]);
            }
        }
    }
    let steps = comptime!(code.len() / 3);
    let zero = Vector::<E, N>::new(E::from_int(0));
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
            r = select_many(a.less_than(&b), b, a);
        } else if comptime!(op == 5) {
            r = select_many(a.greater_than(&b), b, a);
        } else if comptime!(op == 6) {
            r = -a;
        } else if comptime!(op == 7) {
            r = Vector::exp(a);
        } else if comptime!(op == 8) {
            r = Vector::ln(a);
        } else if comptime!(op == 9) {
            r = Vector::sqrt(a);
        } else if comptime!(op == 10) {
            r = a * a;
        } else if comptime!(op == 11) {
            r = select_many(a.greater_than(&zero), a, zero);
        } else if comptime!(op == 12) {
            r = select_many(a.greater_than(&zero), b, zero);
        }
        regs.push(r);
    }
    out[pos] = *regs.index(comptime!(outs[0] as usize));
    if comptime!(outs.len() > 1) {
        out1[pos] = *regs.index(comptime!(outs[1] as usize));
    }
    if comptime!(outs.len() > 2) {
        out2[pos] = *regs.index(comptime!(outs[2] as usize));
    }
    if comptime!(outs.len() > 3) {
        out3[pos] = *regs.index(comptime!(outs[3] as usize));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Precision;
    use crate::value::{float_from_f64, float_values};
    use burn::backend::{DispatchDevice, FlexDevice};

    /// The program's result on the host, op by op, with the unfused kernels' rules.
    fn reference(f: &FusedElementwise, inputs: &[Vec<f64>], n: usize) -> Vec<f64> {
        reference_at(f, inputs, n, f.program.len() - 1)
    }

    /// Instruction `t`'s result on the host.
    fn reference_at(f: &FusedElementwise, inputs: &[Vec<f64>], n: usize, t: usize) -> Vec<f64> {
        (0..n)
            .map(|p| {
                let mut regs: Vec<f32> =
                    inputs.iter().map(|v| if v.len() == n { v[p] as f32 } else { v[p % v.len()] as f32 }).collect();
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
                f64::from(regs[f.inputs + t])
            })
            .collect()
    }

    /// Every op, operands from inputs and from earlier results, a single-element input
    /// broadcast, NaN through ReLU, an Adam-shaped update and a program with every output
    /// slot used: each output of the generated kernel equals
    /// the host's evaluation on every device named in `ENGINE_TEST_DEVICES`, and a value on
    /// flex is left to the ops.
    #[test]
    fn generated_programs_equal_the_ops_one_by_one() {
        use ElementOp::*;
        use Operand::{Input as I, Temp as Tm};
        let programs = [
            // Every binary op, then every unary op on positive values.
            FusedElementwise::new(
                vec![
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
                3,
            ),
            // Adam's update: var - lr * m / (sqrt(v) + eps), lr and eps single elements.
            FusedElementwise::new(
                vec![
                    ins(Sqrt, I(2), I(2)),
                    ins(Add, Tm(0), I(4)),
                    ins(Div, I(1), Tm(1)),
                    ins(Mul, I(3), Tm(2)),
                    ins(Sub, I(0), Tm(3)),
                ],
                5,
            ),
            // Every output slot: three side outputs beside the result (a merged optimizer
            // update's moments), NaN among them.
            FusedElementwise {
                inputs: 2,
                program: vec![
                    ins(Add, I(0), I(1)),
                    ins(Mul, Tm(0), I(0)),
                    ins(Relu, Tm(1), Tm(1)),
                    ins(Sub, Tm(2), Tm(0)),
                ],
                side_outputs: vec![0, 1, 2],
            },
            // ReLU of a NaN is zero; a residual's skip add then ReLU.
            FusedElementwise::new(vec![ins(Add, I(0), I(1)), ins(Relu, Tm(0), Tm(0))], 2),
            // Four single elements around one full-size input, the first of them before it:
            // (s0 + x · s1 - s2) / s3.
            FusedElementwise::new(
                vec![ins(Mul, I(1), I(2)), ins(Add, I(0), Tm(0)), ins(Sub, Tm(1), I(3)), ins(Div, Tm(2), I(4))],
                5,
            ),
            // Six single elements (a merged Adam update's constants) and a side output.
            FusedElementwise {
                inputs: 7,
                program: vec![
                    ins(Mul, I(0), I(1)),
                    ins(Add, Tm(0), I(2)),
                    ins(Mul, Tm(1), I(3)),
                    ins(Sub, Tm(2), I(4)),
                    ins(Div, Tm(3), I(5)),
                    ins(Add, Tm(4), I(6)),
                ],
                side_outputs: vec![1],
            },
        ];
        let flex = DispatchDevice::Flex(FlexDevice);
        let host =
            |d: &[f64], dev: &DispatchDevice| Value::Float(float_from_f64(&[d.len()], d.to_vec(), dev, Precision::F32));
        // 1000 and 1002 elements are computed four and two to a thread where the device
        // reads four floats at a time; 1001, one.
        for n in [1000, 1002, 1001] {
            let x: Vec<f64> = (0..n).map(|i| ((i * 37 % 101) as f64 - 50.0) / 10.0).collect();
            let mut y: Vec<f64> = (0..n).map(|i| ((i * 53 % 97) as f64 + 1.0) / 20.0).collect();
            let finite_y: Vec<f64> = y.iter().map(|v| if v.is_nan() { 1.0 } else { *v }).collect();
            y[7] = f64::NAN;
            let data = |f: &FusedElementwise| -> Vec<Vec<f64>> {
                match (f.inputs, f.program.len()) {
                    (3, _) => vec![x.clone(), finite_y.clone(), vec![0.5]],
                    (5, 5) => vec![x.clone(), x.clone(), finite_y.clone(), vec![0.01], vec![1e-7]],
                    (5, _) => vec![vec![0.25], x.clone(), vec![3.0], vec![-1.5], vec![0.5]],
                    (7, _) => vec![x.clone(), vec![0.5], vec![1.5], vec![2.0], vec![0.25], vec![4.0], vec![-1.0]],
                    _ => vec![x.clone(), y.clone()],
                }
            };
            for (name, device) in crate::device::test_devices() {
                for f in &programs {
                    let data = data(f);
                    let on = |dev: &DispatchDevice| data.iter().map(|d| host(d, dev)).collect::<Vec<_>>();
                    assert!(fused(f, &on(&flex), &[n]).is_none(), "flex");
                    let got = fused(f, &on(&device), &[n]).unwrap_or_else(|| panic!("{name}: {f}"));
                    assert_eq!(got.len(), f.output_temps().count(), "{name}: {f}");
                    for (got, t) in got.into_iter().zip(f.output_temps()) {
                        let (got, want) = (float_values(got), reference_at(f, &data, n, t));
                        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                            let close = (a - b).abs() <= 1e-5 * (1.0 + b.abs()) || (a.is_nan() && b.is_nan());
                            assert!(close, "{name}, {n} elements: {f}: t{t}[{i}] {a} against {b}");
                        }
                    }
                }
            }
        }
    }

    /// A fused layer's epilogue, `activation(y + bias + skip)`, with the bias read as a row
    /// of the last axis: rows of 8, 6 and 5 (four, two and one to a thread where the device
    /// reads four floats at a time), with and without the skip and the ReLU, equal the
    /// host's; a value whose last axis is not the bias's is left to the ops.
    #[test]
    fn an_epilogue_reads_its_bias_as_a_row() {
        use ElementOp::*;
        use Operand::{Input as I, Temp as Tm};
        for (name, device) in crate::device::test_devices() {
            for c in [8, 6, 5] {
                let rows = 36;
                let n = rows * c;
                let y: Vec<f64> = (0..n).map(|i| ((i * 29 % 83) as f64 - 41.0) / 8.0).collect();
                let skip: Vec<f64> = (0..n).map(|i| ((i * 31 % 79) as f64 - 39.0) / 16.0).collect();
                let bias: Vec<f64> = (0..c).map(|i| i as f64 * 0.75 - 2.0).collect();
                let on = |d: &[f64], shape: &[usize]| float_from_f64(shape, d.to_vec(), &device, Precision::F32);
                let (yt, bt, st) = (on(&y, &[rows, c]), on(&bias, &[c]), on(&skip, &[rows, c]));
                for (with_skip, relu) in [(false, false), (false, true), (true, false), (true, true)] {
                    let got = epilogue(&yt, &bt, with_skip.then_some(&st), relu)
                        .unwrap_or_else(|| panic!("{name}: rows of {c}"));
                    let mut program = vec![ins(Add, I(0), I(1))];
                    let mut data = vec![y.clone(), bias.clone()];
                    if with_skip {
                        program.push(ins(Add, Tm(0), I(2)));
                        data.push(skip.clone());
                    }
                    if relu {
                        program.push(ins(Relu, Tm(program.len() - 1), Tm(program.len() - 1)));
                    }
                    let want = reference(&FusedElementwise::new(program, data.len()), &data, n);
                    let got = float_values(got);
                    assert!(want.contains(&0.0) || !relu, "the ReLU clips something");
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{name}, rows of {c}: [{i}] {a} against {b}");
                    }
                }
                let column = on(&bias, &[c, 1]);
                assert!(epilogue(&on(&y, &[rows, c]), &column, None, true).is_none(), "{name}: a column is not a row");
            }
        }
    }

    /// A column (one value per row, layer normalization's statistics) beside a row and a
    /// single element: `(x − col) · row + s` over rows of 8, 6 and 5, and a value of
    /// neither shape is left to the ops.
    #[test]
    fn a_column_is_read_once_per_row() {
        use ElementOp::*;
        use Operand::{Input as I, Temp as Tm};
        let f = FusedElementwise::new(vec![ins(Sub, I(0), I(1)), ins(Mul, Tm(0), I(2)), ins(Add, Tm(1), I(3))], 4);
        for (name, device) in crate::device::test_devices() {
            for c in [8, 6, 5] {
                let rows = 36;
                let x: Vec<f64> = (0..rows * c).map(|i| ((i * 29 % 83) as f64 - 41.0) / 8.0).collect();
                let col: Vec<f64> = (0..rows).map(|i| i as f64 * 0.5 - 3.0).collect();
                let row: Vec<f64> = (0..c).map(|i| i as f64 * 0.25 + 1.0).collect();
                let on = |d: &[f64], shape: &[usize]| {
                    Value::Float(float_from_f64(shape, d.to_vec(), &device, Precision::F32))
                };
                let inputs = [on(&x, &[rows, c]), on(&col, &[rows, 1]), on(&row, &[c]), on(&[0.5], &[1])];
                let got = fused(&f, &inputs, &[rows, c]).and_then(|mut v| v.pop());
                let got = float_values(got.unwrap_or_else(|| panic!("{name}: rows of {c}")));
                for (i, v) in got.iter().enumerate() {
                    let want = f64::from((x[i] as f32 - col[i / c] as f32) * row[i % c] as f32 + 0.5);
                    assert!(
                        (v - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "{name}, rows of {c}: [{i}] {v} against {want}"
                    );
                }
                let odd = [on(&x, &[rows, c]), on(&col[..rows / 2], &[rows / 2, 1]), on(&row, &[c]), on(&[0.5], &[1])];
                assert!(fused(&f, &odd, &[rows, c]).is_none(), "{name}: half a column");
            }
        }
    }

    /// A program with more full-size inputs than the kernel has slots is left to the ops;
    /// one with as many reads each slot once.
    #[test]
    fn more_inputs_than_slots_are_left_to_the_ops() {
        use Operand::{Input as I, Temp as Tm};
        let mut program = vec![ins(ElementOp::Add, I(0), I(1))];
        for k in 2..=WIDE_SLOTS {
            program.push(ins(ElementOp::Add, Tm(k - 2), I(k)));
        }
        let f = FusedElementwise::new(program, WIDE_SLOTS + 1);
        for (name, device) in crate::device::test_devices() {
            let inputs: Vec<Value> = (0..f.inputs)
                .map(|k| Value::Float(float_from_f64(&[8], vec![k as f64; 8], &device, Precision::F32)))
                .collect();
            assert!(fused(&f, &inputs, &[8]).is_none(), "{name}");
            let fewer = FusedElementwise::new(f.program[..WIDE_SLOTS - 1].to_vec(), WIDE_SLOTS);
            let sum = fused(&fewer, &inputs[..WIDE_SLOTS], &[8])
                .and_then(|mut v| v.pop())
                .unwrap_or_else(|| panic!("{name}"));
            let want = (0..WIDE_SLOTS).sum::<usize>() as f64;
            assert_eq!(float_values(sum), vec![want; 8], "{name}: every slot read once");
        }
    }

    /// The width is the widest preferred one that divides the output and every full-size
    /// input's start; with no full-size input it is one.
    #[test]
    fn the_width_divides_the_output_and_each_start() {
        let preferred = || [1usize, 2, 4].into_iter();
        assert_eq!(vector_width(preferred(), 4, 1000, &[]), 1);
        for (name, device) in crate::device::test_devices() {
            let t = float_from_f64(&[1000], vec![0.0; 1000], &device, Precision::F32);
            let (c, _) = float_buffer(&t).unwrap();
            assert_eq!(vector_width(preferred(), 4, 1000, &[c]), 4, "{name}");
            assert_eq!(vector_width(preferred(), 4, 1002, &[c]), 2, "{name}");
            assert_eq!(vector_width(preferred(), 4, 1001, &[c]), 1, "{name}");
            let mut shifted = c.clone();
            shifted.handle.offset_start = Some(8);
            assert_eq!(vector_width(preferred(), 4, 1000, &[c, &shifted]), 2, "{name}");
            assert!(
                vector_width(c.client.io_optimized_vector_sizes(4), 4, 1000, &[c]) > 1,
                "{name} reads one float at a time"
            );
        }
    }
}
