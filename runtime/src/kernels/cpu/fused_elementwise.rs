//! `_FusedElementwise`: the program evaluated over chunks that stay in L1, written once.
//!
//! The output reuses the first full-size input the executor handed over for the last
//! time (a gradient, usually), so an optimizer update allocates at most its result.

use super::{
    Outcome,
    buffer::{Elem, as_uninit, into_vec, is_whole_and_unique, tensor, view},
    simd::multiversion,
};
use crate::{
    Value,
    kernels::{KernelCtx, dims},
    value::T,
};
use engine_graph::ops::{ElementOp, FusedElementwise, Instr, Operand};
use rayon::prelude::*;
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// Elements per chunk: the program's temporaries for one chunk fit in L1.
const CHUNK: usize = 256;
/// Below this many elements a second thread costs more than it saves.
const PARALLEL_MIN: usize = 1 << 16;

enum Src<'a, E: Clone> {
    Full(Cow<'a, [E]>),
    Single(E),
    /// The output buffer, read before each chunk of it is written.
    Out,
}

pub(super) fn fused<E: Elem>(f: &FusedElementwise, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Outcome {
    // An empty program would leave the output unwritten.
    if f.program.is_empty() || inputs.len() != f.inputs || !inputs.iter().all(|v| matches!(v, Value::Float(_))) {
        return Err(inputs);
    }
    let Ok(shape) = ctx.out_shape(0) else { return Err(inputs) };
    let n: usize = shape.iter().product();
    let mut held: Vec<Option<T>> = inputs
        .into_iter()
        .map(|v| match v {
            Value::Float(t) => Some(t),
            _ => None,
        })
        .collect();
    let sizes: Vec<usize> = held.iter().map(|t| t.as_ref().map_or(0, |t| dims(t).iter().product())).collect();
    if sizes.iter().any(|s| *s != n && *s != 1) || !sizes.contains(&n) {
        return Err(held.into_iter().map(|t| t.map_or(Value::Unit, Value::Float)).collect());
    }
    // The output buffer: a full input taken over in place when it is the last reference
    // (a gradient, usually; a variable read is shared with the store, and copying it
    // would cost a read more than a fresh buffer).
    let out_input =
        (0..held.len()).find(|&k| sizes[k] == n && n > 1 && held[k].as_ref().is_some_and(is_whole_and_unique));
    // A fresh buffer is left uninitialized: every element is written once below, where
    // zeroing it first was a pass over the whole output (an optimizer's new variable
    // value) for nothing.
    let taken = out_input.and_then(|k| held[k].take()).map(into_vec::<E>);
    let reads_out = taken.is_some();
    let mut buf: Vec<E> = taken.unwrap_or_else(|| Vec::with_capacity(n));
    if reads_out && buf.len() != n {
        return Ok(Err(ctx.err("fused elementwise input has the wrong length")));
    }
    let srcs: Vec<Src<'_, E>> = held
        .iter()
        .enumerate()
        .map(|(k, t)| match t {
            None => Src::Out,
            Some(t) if sizes[k] == 1 => Src::Single(view::<E>(t).first().copied().unwrap_or_else(E::zero)),
            Some(t) => Src::Full(view::<E>(t)),
        })
        .collect();
    if srcs.iter().any(|s| matches!(s, Src::Full(v) if v.len() != n)) {
        return Ok(Err(ctx.err("fused elementwise input has the wrong length")));
    }
    let per_task = if n >= PARALLEL_MIN && rayon::current_num_threads() > 1 {
        (n / rayon::current_num_threads()).div_ceil(CHUNK) * CHUNK
    } else {
        n.max(1)
    };
    let out: &mut [MaybeUninit<E>] = if reads_out {
        // SAFETY: the same memory, initialized; `region` writes only initialized values
        // through it, so `buf` stays initialized.
        unsafe { as_uninit(&mut buf) }
    } else {
        &mut buf.spare_capacity_mut()[..n]
    };
    let check = ctx.verdict.is_some();
    // Every part runs (no short-circuit): each writes its share of the output.
    let finite = out
        .par_chunks_mut(per_task)
        .enumerate()
        .map(|(i, part)| region(&f.program, &srcs, i * per_task, part, check))
        .reduce(|| true, |a, b| a && b);
    if let Some(verdict) = ctx.verdict {
        verdict.tell(finite);
    }
    if !reads_out {
        // SAFETY: `region` wrote every one of the first `n` elements (the chunks cover
        // `0..n`, and each chunk's elements are stored before it returns).
        unsafe { buf.set_len(n) };
    }
    Ok(Ok(vec![Value::Float(tensor(buf, &shape, ctx.device))]))
}

/// Elements `start..start + out.len()` of the result, into `out`, every element written.
/// `out` is initialized where a source is [`Src::Out`] (the buffer taken over from an
/// input), and may be uninitialized otherwise. With `check`, whether every element
/// written is finite, tested on each chunk while it is in L1 (`true` without).
fn region<E: Elem>(
    program: &[Instr],
    srcs: &[Src<'_, E>],
    start: usize,
    out: &mut [MaybeUninit<E>],
    check: bool,
) -> bool {
    let mut finite = true;
    let total = out.len();
    let mut temps = vec![[E::zero(); CHUNK]; program.len()];
    let reads_out = srcs.iter().any(|s| matches!(s, Src::Out));
    for at in (0..total).step_by(CHUNK) {
        let len = CHUNK.min(total - at);
        {
            let taken: &[E] = if reads_out {
                // SAFETY: with a `Src::Out` the buffer was an initialized input, and this
                // chunk has not been written yet.
                unsafe { &*(&out[at..at + len] as *const [MaybeUninit<E>] as *const [E]) }
            } else {
                &[]
            };
            let chunk = Chunk { srcs, out: taken, at: start + at, len };
            eval_chunk(program, &chunk, &mut temps);
        }
        if let Some(last) = temps.last() {
            if check {
                finite &= store_checked(&last[..len], &mut out[at..at + len]);
            } else {
                store(&last[..len], &mut out[at..at + len]);
            }
        }
    }
    finite
}

/// Where one chunk's operands are: `len` elements from `at` of each full source, the
/// broadcast singles, and the output buffer's own chunk. Resolved per instruction, with
/// no per-chunk list of slices to allocate.
struct Chunk<'c, 'a, E: Clone> {
    srcs: &'c [Src<'a, E>],
    out: &'c [E],
    at: usize,
    len: usize,
}

/// An operand over one chunk: its elements, or one element standing for all of them (a
/// broadcast single, which stays in a register instead of being read from memory).
#[derive(Clone, Copy)]
enum Arg<'s, E> {
    Slice(&'s [E]),
    Scalar(E),
}

impl<E: Elem> Chunk<'_, '_, E> {
    fn input(&self, k: usize) -> Arg<'_, E> {
        match self.srcs.get(k) {
            Some(Src::Full(v)) => Arg::Slice(v.get(self.at..self.at + self.len).unwrap_or(&[])),
            Some(Src::Single(v)) => Arg::Scalar(*v),
            Some(Src::Out) => Arg::Slice(self.out),
            None => Arg::Slice(&[]),
        }
    }
}

#[inline(always)]
fn unary<E: Elem>(out: &mut [E], a: Arg<'_, E>, f: impl Fn(E) -> E) {
    match a {
        Arg::Slice(x) => out.iter_mut().zip(x).for_each(|(o, x)| *o = f(*x)),
        Arg::Scalar(s) => out.fill(f(s)),
    }
}

/// `e^x`: `vmath`'s vectorizable exp in f32 (GELU's gradient, softmax's in a fusion),
/// libm's in f64.
#[inline(always)]
fn exp_of<E: Elem>(x: E) -> E {
    if std::any::TypeId::of::<E>() == std::any::TypeId::of::<f32>()
        && let Some(y) =
            num_traits::ToPrimitive::to_f32(&x).and_then(|v| <E as num_traits::NumCast>::from(super::vmath::exp(v)))
    {
        return y;
    }
    x.exp()
}

#[inline(always)]
fn binary<E: Elem>(out: &mut [E], a: Arg<'_, E>, b: Arg<'_, E>, f: impl Fn(E, E) -> E) {
    match (a, b) {
        (Arg::Slice(x), Arg::Slice(y)) => out.iter_mut().zip(x.iter().zip(y)).for_each(|(o, (x, y))| *o = f(*x, *y)),
        (Arg::Scalar(s), Arg::Slice(y)) => out.iter_mut().zip(y).for_each(|(o, y)| *o = f(s, *y)),
        (Arg::Slice(x), Arg::Scalar(t)) => out.iter_mut().zip(x).for_each(|(o, x)| *o = f(*x, t)),
        (Arg::Scalar(s), Arg::Scalar(t)) => out.fill(f(s, t)),
    }
}

multiversion! {
    /// Runs the program over one chunk: instruction `i` writes `temps[i]`.
    fn eval_chunk<E: Elem>(program: &[Instr], chunk: &Chunk<'_, '_, E>, temps: &mut [[E; CHUNK]]) {
        let len = chunk.len;
        for (i, ins) in program.iter().enumerate() {
            let (done, rest) = temps.split_at_mut(i);
            let Some(out) = rest.first_mut() else { return };
            let out = &mut out[..len];
            let operand = |o: Operand| -> Arg<'_, E> {
                match o {
                    Operand::Input(k) => chunk.input(k),
                    Operand::Temp(t) => Arg::Slice(done.get(t).map_or(&[][..], |t| &t[..len])),
                }
            };
            let a = operand(ins.args[0]);
            if ins.op.arity() == 1 {
                match ins.op {
                    ElementOp::Neg => unary(out, a, |x| -x),
                    ElementOp::Exp => unary(out, a, exp_of),
                    ElementOp::Log => unary(out, a, |x| x.ln()),
                    ElementOp::Sqrt => unary(out, a, |x| x.sqrt()),
                    ElementOp::Relu => unary(out, a, |x| if x > E::zero() { x } else { E::zero() }),
                    _ => unary(out, a, |x| x * x),
                }
                continue;
            }
            let b = operand(ins.args[1]);
            match ins.op {
                ElementOp::Add => binary(out, a, b, |x, y| x + y),
                ElementOp::Sub => binary(out, a, b, |x, y| x - y),
                ElementOp::Mul => binary(out, a, b, |x, y| x * y),
                ElementOp::Div => binary(out, a, b, |x, y| x / y),
                // Ties keep `x`, as the unfused kernels do.
                ElementOp::Maximum => binary(out, a, b, |x, y| if y > x { y } else { x }),
                ElementOp::ReluGrad => binary(out, a, b, |y, dy| if y > E::zero() { dy } else { E::zero() }),
                _ => binary(out, a, b, |x, y| if y < x { y } else { x }),
            }
        }
    }
}

multiversion! {
    /// A chunk's result into the output: wide stores, where the baseline build copies 16
    /// bytes at a time.
    fn store<E: Elem>(result: &[E], out: &mut [MaybeUninit<E>]) {
        for (o, v) in out.iter_mut().zip(result) {
            o.write(*v);
        }
    }
}

multiversion! {
    /// [`store`], and whether every value stored is finite, in the same pass over the
    /// chunk while it is in L1 (a check after the pass reads it from memory): `x - x` is 0
    /// for a finite `x` and NaN otherwise (as `numerics::all_finite`), summed in
    /// independent lanes. `all_finite`'s loop is repeated here rather than called after
    /// [`store`]: the two passes over the chunk cost a 0.8 MB update about 25 µs more
    /// (`fused_elementwise_probe`, the forms alternated).
    #[allow(clippy::eq_op)]
    fn store_checked<E: Elem>(result: &[E], out: &mut [MaybeUninit<E>]) -> bool {
        let mut lanes = [E::zero(); 16];
        let mut outs = out.chunks_exact_mut(16);
        let mut results = result.chunks_exact(16);
        for (o, r) in (&mut outs).zip(&mut results) {
            for ((o, &v), lane) in o.iter_mut().zip(r).zip(lanes.iter_mut()) {
                o.write(v);
                *lane += v - v;
            }
        }
        let mut tail = E::zero();
        for (o, &v) in outs.into_remainder().iter_mut().zip(results.remainder()) {
            o.write(v);
            tail += v - v;
        }
        lanes.iter().fold(tail, |acc, &x| acc + x) == E::zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_graph::ops::{ElementOp, Instr, Operand};

    /// Every op, with each operand a full input, a single or an earlier result, over a
    /// length that is not a whole number of chunks, equals the op applied element by
    /// element (NaN included: `Relu`, `Maximum` and `ReluGrad` treat it as the unfused
    /// kernels do).
    #[test]
    fn every_op_and_operand_kind_equals_the_elementwise_reference() {
        use ElementOp::*;
        let n = CHUNK * 2 + 37;
        let x: Vec<f32> = (0..n).map(|i| if i % 29 == 3 { f32::NAN } else { (i as f32 - 200.0) * 0.01 }).collect();
        let y: Vec<f32> = (0..n).map(|i| ((i * 7) % 13) as f32 * 0.25 + 0.5).collect();
        let reference = |op: ElementOp, a: f32, b: f32| -> f32 {
            match op {
                Add => a + b,
                Sub => a - b,
                Mul => a * b,
                Div => a / b,
                Maximum => {
                    if b > a {
                        b
                    } else {
                        a
                    }
                }
                Minimum => {
                    if b < a {
                        b
                    } else {
                        a
                    }
                }
                ReluGrad => {
                    if a > 0.0 {
                        b
                    } else {
                        0.0
                    }
                }
                Neg => -a,
                // f32's exp is `vmath`'s (its error against f64 is tested there).
                Exp => super::super::vmath::exp(a),
                Log => a.ln(),
                Sqrt => a.sqrt(),
                Relu => {
                    if a > 0.0 {
                        a
                    } else {
                        0.0
                    }
                }
                Square => a * a,
            }
        };
        let ops = [Add, Sub, Mul, Div, Maximum, Minimum, ReluGrad, Neg, Exp, Log, Sqrt, Relu, Square];
        // Operands: x (full), 1.5 (single), y (full) through `t0 = y + 0`.
        let kinds = [Operand::Input(0), Operand::Input(1), Operand::Temp(0)];
        let value = |o: Operand, i: usize| match o {
            Operand::Input(0) => x[i],
            Operand::Input(_) => 1.5,
            Operand::Temp(_) => y[i],
        };
        for op in ops {
            for a in kinds {
                for b in kinds {
                    let program =
                        [Instr { op: Add, args: [Operand::Input(2), Operand::Input(3)] }, Instr { op, args: [a, b] }];
                    let srcs = [
                        Src::Full(Cow::Borrowed(&x[..])),
                        Src::Single(1.5f32),
                        Src::Full(Cow::Borrowed(&y[..])),
                        Src::Single(0.0),
                    ];
                    let mut out = vec![MaybeUninit::<f32>::uninit(); n];
                    region(&program, &srcs, 0, &mut out, false);
                    for (i, o) in out.iter().enumerate() {
                        // SAFETY: `region` writes every element.
                        let got = unsafe { o.assume_init() };
                        let want = reference(op, value(a, i), value(b, i));
                        assert!(
                            got == want || (got.is_nan() && want.is_nan()),
                            "{op:?}({a:?}, {b:?}) at {i}: {got} != {want}"
                        );
                    }
                }
            }
        }
    }

    /// With `check`, the pass says whether every value it wrote is finite: a NaN or an
    /// infinity anywhere (the first element, a chunk's last, the tail's) is seen, however
    /// it arose (read from an input or made by an overflow), and the values written are
    /// the same as without the check.
    #[test]
    fn a_checked_pass_tells_whether_it_wrote_only_finite_values() {
        let n = CHUNK * 3 + 5;
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 100.0).collect();
        // `t0 = x * s; t1 = t0 - 1`: an overflow comes from a large single.
        let program = [
            Instr { op: ElementOp::Mul, args: [Operand::Input(0), Operand::Input(1)] },
            Instr { op: ElementOp::Sub, args: [Operand::Temp(0), Operand::Input(2)] },
        ];
        let run = |x: &[f32], s: f32, check: bool| {
            let srcs = [Src::Full(Cow::Borrowed(x)), Src::Single(s), Src::Single(1.0f32)];
            let mut out = vec![MaybeUninit::<f32>::uninit(); n];
            let finite = region(&program, &srcs, 0, &mut out, check);
            // SAFETY: `region` writes every element.
            (finite, out.iter().map(|o| unsafe { o.assume_init() }.to_bits()).collect::<Vec<u32>>())
        };
        let (finite, clean) = run(&x, 2.0, true);
        assert!(finite);
        assert_eq!(clean, run(&x, 2.0, false).1);
        for at in [0, CHUNK - 1, CHUNK, 2 * CHUNK + 17, n - 1] {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut y = x.clone();
                y[at] = bad;
                let (finite, with) = run(&y, 2.0, true);
                assert!(!finite, "{bad} at {at}");
                assert_eq!(with, run(&y, 2.0, false).1);
                assert!(run(&y, 2.0, false).0, "unchecked, nothing is said");
            }
        }
        // Finite inputs, an overflowing product.
        assert!(!run(&x, 1e38, true).0);
    }

    /// Time of `v - 0.1 (0.9 a + g)` over 784 × 256 floats, written over `g`, with buffers
    /// out of L2 (eight sets in turn; `PROBE_N`, `PROBE_SETS` change that), against a
    /// plain `a + b` pass over the same sizes.
    #[test]
    #[ignore = "a timing probe: cargo test --release -- --ignored fused_elementwise_probe"]
    fn fused_elementwise_probe() {
        let var = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
        let (n, sets) = (var("PROBE_N", 784 * 256), var("PROBE_SETS", 8));
        let program = [
            Instr { op: ElementOp::Mul, args: [Operand::Input(0), Operand::Input(1)] },
            Instr { op: ElementOp::Add, args: [Operand::Temp(0), Operand::Input(2)] },
            Instr { op: ElementOp::Mul, args: [Operand::Input(4), Operand::Temp(1)] },
            Instr { op: ElementOp::Sub, args: [Operand::Input(3), Operand::Temp(2)] },
        ];
        let mut data: Vec<[Vec<f32>; 4]> =
            (0..sets).map(|s| std::array::from_fn(|k| vec![(s * 4 + k) as f32 * 1e-3; n])).collect();
        let reps = 400 * (784 * 256) / n;
        let mut update = |check: bool| {
            let t = std::time::Instant::now();
            for r in 0..reps {
                let [accum, grad, var, _] = &mut data[r % sets];
                let srcs = [
                    Src::Single(0.9f32),
                    Src::Full(Cow::Borrowed(&accum[..])),
                    Src::Out,
                    Src::Full(Cow::Borrowed(&var[..])),
                    Src::Single(0.1),
                ];
                // SAFETY: initialized floats, written back as initialized floats.
                let out = unsafe { as_uninit(grad) };
                assert!(region(&program, &srcs, 0, out, check));
                // The separate check the fold replaces: the result read back from memory.
                if !check {
                    assert!(super::super::numerics::all_finite(&grad[..]));
                }
            }
            t.elapsed().as_secs_f64() / reps as f64
        };
        // Alternated, best of three: the update and its check's pass over the result, and
        // the update checking each chunk as it stores it.
        let (mut fused, mut checked) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            fused = fused.min(update(false));
            checked = checked.min(update(true));
        }
        let t = std::time::Instant::now();
        for r in 0..reps {
            let [a, b, c, _] = &mut data[r % sets];
            for ((c, a), b) in c.iter_mut().zip(a.iter()).zip(b.iter()) {
                *c = *a + *b;
            }
        }
        let plain = t.elapsed().as_secs_f64() / reps as f64;
        eprintln!(
            "v - 0.1 (0.9 a + g) then a check's pass {:.1} us, checked as it is stored {:.1} us; a + b {:.1} us",
            fused * 1e6,
            checked * 1e6,
            plain * 1e6
        );
    }
}
