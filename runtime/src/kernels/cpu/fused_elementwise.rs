//! `_FusedElementwise`: the program evaluated over chunks that stay in L1, written once.
//!
//! The output reuses the first full-size input the executor handed over for the last
//! time (a gradient, usually), so an optimizer update allocates at most its result.

use super::{
    Outcome,
    buffer::{Elem, into_vec, is_whole_and_unique, tensor, view},
    numerics::FiniteLanes,
    simd::multiversion,
    update_loops,
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

/// Elements per chunk, at most and at least (see [`chunk_len`]).
const MAX_CHUNK: usize = 1024;
const MIN_CHUNK: usize = 256;
/// Below this many elements a second thread costs more than it saves.
const PARALLEL_MIN: usize = 1 << 16;

enum Src<'a, E: Clone> {
    Full(Cow<'a, [E]>),
    Single(E),
    /// Output `j`'s buffer, taken over from this input: each chunk of it is read before
    /// it is written.
    Out(usize),
}

/// The start of an output buffer, shared by the parts of one pass: each part writes only
/// its own range of every output.
#[derive(Clone, Copy)]
struct OutBase<E>(*mut MaybeUninit<E>);
// SAFETY: the parts of a pass use disjoint ranges of the buffer (see `region`).
unsafe impl<E: Send> Send for OutBase<E> {}
// SAFETY: as above.
unsafe impl<E: Sync> Sync for OutBase<E> {}

pub(super) fn fused<E: Elem>(f: &FusedElementwise, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Outcome {
    let outputs: Vec<usize> = f.output_temps().collect();
    // An empty program would leave the output unwritten; a mask of finite outputs has 64
    // bits.
    if f.program.is_empty()
        || outputs.len() > 64
        || outputs.iter().any(|&t| t >= f.program.len())
        || inputs.len() != f.inputs
        || !inputs.iter().all(|v| matches!(v, Value::Float(_)))
    {
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
    // The output buffers: each takes over a full input the executor handed over for the
    // last time (a gradient, usually; a variable read is shared with the store, and copying
    // it would cost a read more than a fresh buffer), in order, the rest fresh. A fresh
    // buffer is left uninitialized: every element is written once below, where zeroing it
    // first was a pass over the whole output (an optimizer's new variable value) for
    // nothing.
    let unique: Vec<usize> = (0..held.len())
        .filter(|&k| sizes[k] == n && n > 1 && held[k].as_ref().is_some_and(is_whole_and_unique))
        .collect();
    let mut taken_from: Vec<Option<usize>> = Vec::with_capacity(outputs.len());
    let mut bufs: Vec<Vec<E>> = Vec::with_capacity(outputs.len());
    for j in 0..outputs.len() {
        let k = unique.get(j).copied();
        let buf = match k.and_then(|k| held[k].take()) {
            Some(t) => into_vec::<E>(t),
            None => Vec::with_capacity(n),
        };
        if k.is_some() && buf.len() != n {
            return Ok(Err(ctx.err("fused elementwise input has the wrong length")));
        }
        taken_from.push(k);
        bufs.push(buf);
    }
    let srcs: Vec<Src<'_, E>> = held
        .iter()
        .enumerate()
        .map(|(k, t)| match t {
            None => Src::Out(taken_from.iter().position(|&from| from == Some(k)).unwrap_or(0)),
            Some(t) if sizes[k] == 1 => Src::Single(view::<E>(t).first().copied().unwrap_or_else(E::zero)),
            Some(t) => Src::Full(view::<E>(t)),
        })
        .collect();
    if srcs.iter().any(|s| matches!(s, Src::Full(v) if v.len() != n)) {
        return Ok(Err(ctx.err("fused elementwise input has the wrong length")));
    }
    // Parts start at multiples of the longest chunk, so of whichever chunk `region` picks.
    let per_task = if n >= PARALLEL_MIN && rayon::current_num_threads() > 1 {
        (n / rayon::current_num_threads()).div_ceil(MAX_CHUNK) * MAX_CHUNK
    } else {
        n.max(1)
    };
    let parts = n.div_ceil(per_task);
    let all = u64::MAX >> (64 - outputs.len());
    let asked = ctx.verdict.map_or(0, |v| v.asked()) & all;
    let outs: Vec<OutBase<E>> = bufs.iter_mut().map(|b| OutBase(b.as_mut_ptr().cast())).collect();
    let temps = allocate(&f.program, &outputs);
    let update = update_loops::recognize(&f.program, &outputs, |k| matches!(srcs.get(k), Some(Src::Single(_))));
    let part = |i: usize| {
        let start = i * per_task;
        let len = per_task.min(n - start);
        // SAFETY: every buffer holds `n` elements (taken ones initialized, fresh ones with
        // that capacity), the parts' ranges are disjoint, and a taken buffer is an input
        // the executor handed over for the last time, read only through `Src::Out`.
        unsafe {
            match &update {
                Some(m) => update_loop(m, &srcs, &outs, start, len, asked),
                None => region(&f.program, &temps, &srcs, &outputs, &outs, start, len, asked),
            }
        }
    };
    // One part runs on the calling thread: handed to the pool it would cost two context
    // switches at one thread (see `buffer::min_len`).
    let finite = if parts <= 1 { part(0) } else { (0..parts).into_par_iter().map(part).reduce(|| asked, |a, b| a & b) };
    if let Some(verdict) = ctx.verdict {
        verdict.tell(finite & asked);
    }
    let mut values = Vec::with_capacity(bufs.len());
    for (mut buf, from) in bufs.into_iter().zip(taken_from) {
        if from.is_none() {
            // SAFETY: `region` wrote every one of the first `n` elements (the parts cover
            // `0..n`, and each chunk of each output is stored before a part returns).
            unsafe { buf.set_len(n) };
        }
        values.push(Value::Float(tensor(buf, &shape, ctx.device)));
    }
    Ok(Ok(values))
}

/// The chunk a pass works in: the longest, halving from [`MAX_CHUNK`] to [`MIN_CHUNK`],
/// whose working set (a chunk of each of `temps` temporaries, of each full input and of
/// each output) fits three quarters of this core's L1d. Each instruction of the program
/// costs a dispatch per chunk, which at 256 elements was most of a momentum update's time
/// (a 0.8 MB update in cache ran at a quarter of a plain `a + b` pass's speed); an Adam
/// update's fifteen instructions keep five temporaries and seven streams, which at 1024
/// elements (44 KB) crowd a 48 KB L1.
fn chunk_len<E: Clone>(temps: usize, srcs: &[Src<'_, E>], outputs: usize) -> usize {
    let l1 = match crate::HostCpu::get().caches[0] {
        0 => 32 << 10,
        bytes => bytes,
    };
    let full = srcs.iter().filter(|s| matches!(s, Src::Full(_))).count();
    chunk_for(l1, (temps + full + outputs) * std::mem::size_of::<E>())
}

/// [`chunk_len`] for an L1d of `l1` bytes and a working set of `per_element` bytes per
/// element.
fn chunk_for(l1: usize, per_element: usize) -> usize {
    let mut chunk = MAX_CHUNK;
    while chunk > MIN_CHUNK && chunk * per_element > l1 / 4 * 3 {
        chunk /= 2;
    }
    chunk
}

/// Elements `start..start + len` of every output, each element written; with bit `j` of
/// `asked`, whether output `j`'s elements are all finite, tested on each chunk while it is
/// in L1. Returns `asked` with the bits of outputs found not finite cleared. `(slots,
/// count)` is [`allocate`]'s answer for `program` and `outputs`.
///
/// # Safety
/// Each of `outs` is valid for writes of `start + len` elements and initialized where a
/// source is its [`Src::Out`]; nothing else reads or writes that range while this runs.
#[allow(clippy::too_many_arguments, reason = "one pass's program, its buffers and its range")]
unsafe fn region<E: Elem>(
    program: &[Instr],
    (slots, count): &(Vec<usize>, usize),
    srcs: &[Src<'_, E>],
    outputs: &[usize],
    outs: &[OutBase<E>],
    start: usize,
    len: usize,
    asked: u64,
) -> u64 {
    let mut finite = asked;
    let chunk = chunk_len(*count, srcs, outs.len()).min(len.max(1));
    let mut held = Vec::new();
    let temps = super::buffer::line_aligned(&mut held, chunk * count);
    for at in (start..start + len).step_by(chunk) {
        let n = chunk.min(start + len - at);
        eval_chunk(program, slots, &Chunk { srcs, outs, at, len: n }, temps, chunk);
        for (j, (&t, out)) in outputs.iter().zip(outs).enumerate() {
            let Some(result) = slots.get(t).and_then(|&s| temps.get(s * chunk..s * chunk + n)) else { continue };
            // SAFETY: the caller's range; `eval_chunk` above has finished reading it.
            let out = unsafe { std::slice::from_raw_parts_mut(out.0.add(at), n) };
            if asked & (1 << j) != 0 {
                if !store_checked(result, out) {
                    finite &= !(1 << j);
                }
            } else {
                store(result, out);
            }
        }
    }
    finite
}

/// [`region`] as one loop, for a program [`update_loops::recognize`] matched.
///
/// # Safety
/// As [`region`]'s.
unsafe fn update_loop<E: Elem>(
    m: &update_loops::Matched,
    srcs: &[Src<'_, E>],
    outs: &[OutBase<E>],
    start: usize,
    len: usize,
    asked: u64,
) -> u64 {
    let single = |k: Option<usize>| match k.and_then(|k| srcs.get(k)) {
        Some(Src::Single(v)) => *v,
        _ => E::zero(),
    };
    // SAFETY (of each `add`): the caller's range is within every buffer of the pass.
    let full = |k: Option<usize>| -> *const E {
        match k.and_then(|k| srcs.get(k)) {
            Some(Src::Full(v)) => unsafe { v.as_ptr().add(start) },
            Some(Src::Out(j)) => {
                outs.get(*j).map_or(std::ptr::null(), |o| unsafe { o.0.add(start).cast::<E>().cast_const() })
            }
            _ => std::ptr::null(),
        }
    };
    // SAFETY: as above.
    let out = |j: usize| outs.get(j).map_or(std::ptr::null_mut(), |o| unsafe { o.0.add(start).cast::<E>() });
    let streams = update_loops::Streams {
        singles: m.singles.map(single),
        fulls: m.fulls.map(full),
        outs: [out(0), out(1), out(2)],
    };
    // SAFETY: `recognize` bound every stream the update uses to an input of the pass (a
    // full one, or the output buffer that took it over) or to one of its outputs, each
    // valid for `start + len` elements; an output overlaps an input only as the buffer it
    // took over, of which the loop reads each block before it writes that block.
    unsafe { update_loops::run(m.update, &streams, len, asked) }
}

/// Where one chunk's operands are: `len` elements from `at` of each full source, the
/// broadcast singles, and the output buffers taken over from inputs. Resolved per
/// instruction, with no per-chunk list of slices to allocate.
struct Chunk<'c, 'a, E: Clone> {
    srcs: &'c [Src<'a, E>],
    outs: &'c [OutBase<E>],
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
            Some(Src::Out(j)) => match self.outs.get(*j) {
                // SAFETY: a taken buffer was an initialized input of the pass's length (see
                // `region`), and this chunk of it is written only after the chunk is
                // evaluated.
                Some(out) => {
                    Arg::Slice(unsafe { std::slice::from_raw_parts(out.0.add(self.at).cast::<E>(), self.len) })
                }
                None => Arg::Slice(&[]),
            },
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

/// A chunk-sized buffer for each instruction's result, reused once the result is dead: an
/// instruction writes a buffer none of its operands is in, and an output's buffer is kept
/// to the end. Returns each instruction's buffer and how many there are. A merged Adam
/// update is fifteen instructions, whose results one per buffer (15 KB a chunk) crowded
/// the inputs' and outputs' lines out of a 32 KB L1; three or four buffers do.
fn allocate(program: &[Instr], outputs: &[usize]) -> (Vec<usize>, usize) {
    let mut last_use: Vec<usize> = (0..program.len()).collect();
    for (i, ins) in program.iter().enumerate() {
        for a in &ins.args[..ins.op.arity()] {
            if let Operand::Temp(t) = *a
                && let Some(l) = last_use.get_mut(t)
            {
                *l = i;
            }
        }
    }
    for &t in outputs {
        if let Some(l) = last_use.get_mut(t) {
            *l = usize::MAX;
        }
    }
    let (mut slots, mut free, mut count) = (Vec::with_capacity(program.len()), Vec::new(), 0);
    for i in 0..program.len() {
        let slot = free.pop().unwrap_or_else(|| {
            count += 1;
            count - 1
        });
        slots.push(slot);
        // Results whose last reader is this instruction free their buffers after it.
        for (t, &l) in last_use.iter().enumerate().take(i + 1) {
            if l == i {
                free.push(slots[t]);
            }
        }
    }
    (slots, count)
}

multiversion! {
    /// Runs the program over one chunk: instruction `i` writes buffer `slots[i]`, elements
    /// `slots[i] * stride..` of `temps`.
    fn eval_chunk<E: Elem>(program: &[Instr], slots: &[usize], chunk: &Chunk<'_, '_, E>, temps: &mut [E], stride: usize) {
        let len = chunk.len;
        if len > stride {
            return;
        }
        for (i, ins) in program.iter().enumerate() {
            let Some(&slot) = slots.get(i) else { return };
            if (slot + 1) * stride > temps.len() {
                return;
            }
            let (before, rest) = temps.split_at_mut(slot * stride);
            let (out, after) = rest.split_at_mut(stride);
            let out = &mut out[..len];
            let operand = |o: Operand| -> Arg<'_, E> {
                match o {
                    Operand::Input(k) => chunk.input(k),
                    Operand::Temp(t) => {
                        let s = slots.get(t).copied().unwrap_or(slot);
                        let at = if s < slot { before.get(s * stride..) } else { s.checked_sub(slot + 1).and_then(|d| after.get(d * stride..)) };
                        Arg::Slice(at.and_then(|b| b.get(..len)).unwrap_or(&[]))
                    }
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
    /// chunk while it is in L1 (a check after the pass reads it from memory), summed in
    /// independent lanes ([`FiniteLanes`]). Not [`store`] and then `all_finite`: the two
    /// passes over the chunk cost a 0.8 MB update about 25 µs more
    /// (`fused_elementwise_probe`, the forms alternated).
    fn store_checked<E: Elem>(result: &[E], out: &mut [MaybeUninit<E>]) -> bool {
        let mut lanes = FiniteLanes::new();
        let mut outs = out.chunks_exact_mut(16);
        let mut results = result.chunks_exact(16);
        for (o, r) in (&mut outs).zip(&mut results) {
            for (k, (o, &v)) in o.iter_mut().zip(r).enumerate() {
                o.write(v);
                lanes.note(k, v);
            }
        }
        for (k, (o, &v)) in outs.into_remainder().iter_mut().zip(results.remainder()).enumerate() {
            o.write(v);
            lanes.note(k, v);
        }
        lanes.finite()
    }
}

#[cfg(test)]
mod tests {
    use super::super::buffer::as_uninit;
    use super::*;
    use engine_graph::ops::{ElementOp, Instr, Operand};

    /// `region` over one whole buffer, output 0 the last instruction's result; whether it
    /// is finite throughout (always true without `check`).
    fn region_into<E: Elem>(program: &[Instr], srcs: &[Src<'_, E>], out: &mut [MaybeUninit<E>], check: bool) -> bool {
        let outs = [OutBase(out.as_mut_ptr())];
        // SAFETY: one buffer of `out.len()` elements, initialized where a source is
        // `Src::Out(0)` (the callers' `as_uninit` of initialized floats).
        unsafe {
            let outputs = [program.len() - 1];
            region(program, &allocate(program, &outputs), srcs, &outputs, &outs, 0, out.len(), u64::from(check))
                == u64::from(check)
        }
    }

    /// Every op, with each operand a full input, a single or an earlier result, over a
    /// length that is not a whole number of chunks, equals the op applied element by
    /// element (NaN included: `Relu`, `Maximum` and `ReluGrad` treat it as the unfused
    /// kernels do).
    #[test]
    fn every_op_and_operand_kind_equals_the_elementwise_reference() {
        use ElementOp::*;
        let n = MAX_CHUNK * 2 + 37;
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
                    region_into(&program, &srcs, &mut out, false);
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
        let n = MAX_CHUNK * 3 + 5;
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 100.0).collect();
        // `t0 = x * s; t1 = t0 - 1`: an overflow comes from a large single.
        let program = [
            Instr { op: ElementOp::Mul, args: [Operand::Input(0), Operand::Input(1)] },
            Instr { op: ElementOp::Sub, args: [Operand::Temp(0), Operand::Input(2)] },
        ];
        let run = |x: &[f32], s: f32, check: bool| {
            let srcs = [Src::Full(Cow::Borrowed(x)), Src::Single(s), Src::Single(1.0f32)];
            let mut out = vec![MaybeUninit::<f32>::uninit(); n];
            let finite = region_into(&program, &srcs, &mut out, check);
            // SAFETY: `region` writes every element.
            (finite, out.iter().map(|o| unsafe { o.assume_init() }.to_bits()).collect::<Vec<u32>>())
        };
        let (finite, clean) = run(&x, 2.0, true);
        assert!(finite);
        assert_eq!(clean, run(&x, 2.0, false).1);
        for at in [
            0,
            MIN_CHUNK - 1,
            MIN_CHUNK,
            MAX_CHUNK / 2 - 1,
            MAX_CHUNK / 2,
            MAX_CHUNK - 1,
            MAX_CHUNK,
            2 * MAX_CHUNK + 17,
            n - 1,
        ] {
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

    /// Each optimizer's loop (`update_loops`) gives the interpreter's bits and finiteness
    /// mask: over lengths with and without a tail, in one part or two (as threads split a
    /// pass), into fresh buffers or with output 0 written over the input it took over, and
    /// with a NaN or an infinity in an input at the start, the middle or the end.
    #[test]
    fn the_update_loops_equal_the_interpreter_bit_for_bit() {
        update_loops_equal_the_interpreter::<f32>();
        // A `Precision::F64` job (the elastic tests') runs them in f64.
        update_loops_equal_the_interpreter::<f64>();
    }

    fn update_loops_equal_the_interpreter<E: Elem>() {
        use update_loops::Update;
        let e = |x: f64| <E as num_traits::NumCast>::from(x).unwrap_or_else(E::zero);
        for update in [Update::Sgd, Update::Momentum, Update::Nesterov, Update::Adam, Update::AdamW] {
            let (program, outputs, singles) = update_loops::example(update);
            let constants = [0.1, 0.9, 0.1, 0.999, 0.001, 1e-7, 0.004].map(e);
            for n in [5, 16, 16 * 37 + 11] {
                let data: Vec<Vec<E>> = (0..singles.len())
                    .map(|k| (0..n).map(|i| e(((i * 7 + k * 13) % 23) as f64 * 0.05 + 0.01)).collect())
                    .collect();
                let first_full = singles.iter().position(|s| !s).expect("a full input");
                for (bad, at) in [(None, 0), (Some(E::nan()), 0), (Some(E::infinity()), n / 2), (Some(E::nan()), n - 1)]
                {
                    let mut data = data.clone();
                    if let Some(bad) = bad {
                        data[first_full][at] = bad;
                    }
                    for take in [false, true] {
                        let run = |with_loop: bool, split: usize| -> (u64, Vec<Vec<u8>>) {
                            let mut taken = data[first_full].clone();
                            let srcs: Vec<Src<'_, E>> = (0..singles.len())
                                .map(|k| match k {
                                    k if singles[k] => Src::Single(constants[k % constants.len()]),
                                    k if take && k == first_full => Src::Out(0),
                                    k => Src::Full(Cow::Borrowed(&data[k][..])),
                                })
                                .collect();
                            let mut fresh = vec![vec![MaybeUninit::<E>::uninit(); n]; outputs.len()];
                            let mut bases: Vec<OutBase<E>> =
                                fresh.iter_mut().map(|o| OutBase(o.as_mut_ptr())).collect();
                            if take {
                                bases[0] = OutBase(taken.as_mut_ptr().cast());
                            }
                            let asked = (1u64 << outputs.len()) - 1;
                            let temps = allocate(&program, &outputs);
                            let matched = update_loops::recognize(&program, &outputs, |k| singles[k]);
                            assert_eq!(matched.as_ref().map(|m| m.update), Some(update));
                            let mut finite = asked;
                            for (start, len) in [(0, split), (split, n - split)] {
                                // SAFETY: buffers of n elements, the taken one initialized.
                                finite &= unsafe {
                                    match (&matched, with_loop) {
                                        (Some(m), true) => update_loop(m, &srcs, &bases, start, len, asked),
                                        _ => region(&program, &temps, &srcs, &outputs, &bases, start, len, asked),
                                    }
                                };
                            }
                            let bits = (0..outputs.len())
                                .map(|j| match j {
                                    0 if take => bytemuck::cast_slice(&taken).to_vec(),
                                    // SAFETY: every element was written.
                                    j => fresh[j]
                                        .iter()
                                        .flat_map(|x| bytemuck::bytes_of(unsafe { x.assume_init_ref() }).to_vec())
                                        .collect(),
                                })
                                .collect();
                            (finite, bits)
                        };
                        let want = run(false, n);
                        for split in [n, n / 3] {
                            assert_eq!(
                                run(true, split),
                                want,
                                "{update:?} n {n} bad {bad:?} at {at} take {take} split {split}"
                            );
                        }
                        assert_eq!(want.0 == (1 << outputs.len()) - 1, bad.is_none(), "{update:?} {bad:?}");
                    }
                }
            }
        }
    }

    /// A momentum update (three temporaries, two full inputs, two outputs: 28 bytes an
    /// element) takes the longest chunk on a 48 KB L1 and half of it on a 32 KB one; an
    /// Adam update (five, three and three: 44 bytes) half on both; a chunk never falls
    /// below the least.
    #[test]
    fn the_chunk_fits_the_working_set_in_l1() {
        assert_eq!(chunk_for(48 << 10, 28), MAX_CHUNK);
        assert_eq!(chunk_for(32 << 10, 28), MAX_CHUNK / 2);
        assert_eq!(chunk_for(48 << 10, 44), MAX_CHUNK / 2);
        assert_eq!(chunk_for(32 << 10, 44), MAX_CHUNK / 2);
        assert_eq!(chunk_for(32 << 10, 400), MIN_CHUNK);
    }

    /// Buffers are reused once their result is dead, never by a reader of that result,
    /// and an output's buffer is never reused: an Adam-shaped chain of twelve instructions
    /// with two side outputs needs five buffers, and each result is what one buffer per
    /// instruction gives.
    #[test]
    fn dead_results_give_their_buffers_to_later_instructions() {
        use ElementOp::*;
        use Operand::{Input as I, Temp as Tm};
        let ins = |op, a, b| Instr { op, args: [a, b] };
        // m' = 0.9 m + 0.1 g; s' = 0.99 s + 0.01 g²; v' = v - lr m' / (sqrt(s') + eps).
        let program = [
            ins(Mul, I(0), I(1)),
            ins(Mul, I(2), I(3)),
            ins(Add, Tm(0), Tm(1)),
            ins(Square, I(3), I(3)),
            ins(Mul, I(4), Tm(3)),
            ins(Mul, I(5), I(6)),
            ins(Add, Tm(5), Tm(4)),
            ins(Sqrt, Tm(6), Tm(6)),
            ins(Add, Tm(7), I(7)),
            ins(Div, Tm(2), Tm(8)),
            ins(Mul, I(8), Tm(9)),
            ins(Sub, I(9), Tm(10)),
        ];
        let outputs = [11, 2, 6];
        let (slots, count) = allocate(&program, &outputs);
        assert!(count <= 5, "{count} buffers: {slots:?}");
        for (i, p) in program.iter().enumerate() {
            for a in &p.args[..p.op.arity()] {
                if let Operand::Temp(t) = a {
                    assert_ne!(slots[*t], slots[i], "instruction {i} writes over its operand t{t}");
                    // Nothing between the operand and its reader took its buffer.
                    assert!((t + 1..i).all(|k| slots[k] != slots[*t]), "t{t} overwritten before instruction {i}");
                }
            }
        }
        for &o in &outputs {
            assert!((o + 1..program.len()).all(|k| slots[k] != slots[o]), "output t{o} overwritten");
        }
        let n = MAX_CHUNK + 9;
        let full = |seed: usize| -> Vec<f32> { (0..n).map(|i| ((i * seed) % 17) as f32 * 0.25 + 0.5).collect() };
        let (m, g, s, v) = (full(3), full(5), full(7), full(11));
        let srcs = [
            Src::Single(0.9f32),
            Src::Full(Cow::Borrowed(&m[..])),
            Src::Single(0.1),
            Src::Full(Cow::Borrowed(&g[..])),
            Src::Single(0.01),
            Src::Single(0.99),
            Src::Full(Cow::Borrowed(&s[..])),
            Src::Single(1e-7),
            Src::Single(0.001),
            Src::Full(Cow::Borrowed(&v[..])),
        ];
        let mut outs = vec![vec![MaybeUninit::<f32>::uninit(); n]; 3];
        let bases: Vec<OutBase<f32>> = outs.iter_mut().map(|o| OutBase(o.as_mut_ptr())).collect();
        // SAFETY: three fresh buffers of n elements, no `Src::Out`.
        let finite = unsafe { region(&program, &(slots, count), &srcs, &outputs, &bases, 0, n, 0b111) };
        assert_eq!(finite, 0b111);
        for (j, &t) in outputs.iter().enumerate() {
            for i in 0..n {
                let mut r = Vec::new();
                for p in &program[..=t] {
                    let val = |o: Operand| match o {
                        Operand::Temp(k) => r[k],
                        Operand::Input(k) => match &srcs[k] {
                            Src::Full(x) => x[i],
                            Src::Single(c) => *c,
                            Src::Out(_) => f32::NAN,
                        },
                    };
                    let (a, b) = (val(p.args[0]), val(p.args[1]));
                    r.push(match p.op {
                        Add => a + b,
                        Sub => a - b,
                        Mul => a * b,
                        Div => a / b,
                        Sqrt => a.sqrt(),
                        _ => a * a,
                    });
                }
                // SAFETY: `region` wrote every element.
                let got = unsafe { outs[j][i].assume_init() };
                assert_eq!(got.to_bits(), r[t].to_bits(), "output {j} (t{t}) at {i}");
            }
        }
    }

    /// Two outputs, the second written over an input it reads (`Src::Out(1)`): both are
    /// right, and the finiteness mask clears only the bit of the output that is not
    /// finite.
    #[test]
    fn each_output_of_a_merged_pass_is_checked_on_its_own() {
        use Operand::{Input as I, Temp as Tm};
        let n = MAX_CHUNK * 2 + 3;
        let ins = |op, a, b| Instr { op, args: [a, b] };
        // t0 = 0.9 a + g (over g, output 1); t2 = v - 0.1 t0 (fresh, output 0).
        let program = [
            ins(ElementOp::Mul, I(0), I(1)),
            ins(ElementOp::Add, Tm(0), I(2)),
            ins(ElementOp::Mul, I(4), Tm(1)),
            ins(ElementOp::Sub, I(3), Tm(2)),
        ];
        let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
        for bad_v in [false, true] {
            let mut g: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.02).collect();
            let mut v: Vec<f32> = (0..n).map(|i| i as f32).collect();
            if bad_v {
                v[MAX_CHUNK + 1] = f32::INFINITY;
            }
            let want_acc: Vec<f32> = (0..n).map(|i| 0.9 * a[i] + g[i]).collect();
            let want_v: Vec<f32> = (0..n).map(|i| v[i] - 0.1 * want_acc[i]).collect();
            let mut fresh = vec![MaybeUninit::<f32>::uninit(); n];
            let bases = [OutBase(fresh.as_mut_ptr()), OutBase(g.as_mut_ptr().cast::<MaybeUninit<f32>>())];
            let srcs = [
                Src::Single(0.9f32),
                Src::Full(Cow::Borrowed(&a[..])),
                Src::Out(1),
                Src::Full(Cow::Borrowed(&v[..])),
                Src::Single(0.1),
            ];
            // SAFETY: a fresh buffer and `g`, both of n elements, `g` initialized.
            let finite = unsafe { region(&program, &allocate(&program, &[3, 1]), &srcs, &[3, 1], &bases, 0, n, 0b11) };
            assert_eq!(finite, if bad_v { 0b10 } else { 0b11 }, "bad v: {bad_v}");
            // SAFETY: every element was written.
            let got_v: Vec<f32> = fresh.iter().map(|x| unsafe { x.assume_init() }).collect();
            assert_eq!(
                got_v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want_v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
            assert_eq!(g, want_acc);
        }
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
        let reps = var("PROBE_REPS", 400) * (784 * 256) / n;
        let mut update = |check: bool| {
            let t = std::time::Instant::now();
            for r in 0..reps {
                let [accum, grad, var, _] = &mut data[r % sets];
                let srcs = [
                    Src::Single(0.9f32),
                    Src::Full(Cow::Borrowed(&accum[..])),
                    Src::Out(0),
                    Src::Full(Cow::Borrowed(&var[..])),
                    Src::Single(0.1),
                ];
                // SAFETY: initialized floats, written back as initialized floats.
                let out = unsafe { as_uninit(grad) };
                assert!(region_into(&program, &srcs, out, check));
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

    /// Momentum's accumulator and update over 784 × 256 floats, buffers out of L2 (eight
    /// sets in turn): as two passes (`a' = 0.9 a + g` over `g`, then `v' = v - 0.1 a'`
    /// into a fresh buffer) against one merged pass writing both (each layout of the
    /// outputs: `v'` over `g` and `a'` fresh, or the other way), each checked as stored.
    /// `PROBE_STAGGER=80` starts each buffer of a set 320 bytes after the previous one's
    /// page offset: on a Zen 4 VM that made every form about twice as fast and steady
    /// (122–165 µs against 127–344 with the buffers at one offset), while a staggering
    /// allocator in the engine moved its steps by nothing measurable (journal).
    #[test]
    #[ignore = "a timing probe: cargo test --release -- --ignored merged_update_probe"]
    fn merged_update_probe() {
        use Operand::{Input as I, Temp as Tm};
        let n = 784 * 256;
        let sets = 8;
        let ins = |op, a, b| Instr { op, args: [a, b] };
        let accum = [ins(ElementOp::Mul, I(0), I(1)), ins(ElementOp::Add, Tm(0), I(2))];
        let update = [ins(ElementOp::Mul, I(1), I(2)), ins(ElementOp::Sub, I(0), Tm(0))];
        let merged = [accum[0], accum[1], ins(ElementOp::Mul, I(4), Tm(1)), ins(ElementOp::Sub, I(3), Tm(2))];
        // PROBE_STAGGER: each buffer of a set starts that many floats after the previous
        // one's page offset (0: all at the allocator's offset, as the engine's are).
        let stagger: usize = std::env::var("PROBE_STAGGER").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut backing: Vec<[Vec<f32>; 4]> =
            (0..sets).map(|s| std::array::from_fn(|k| vec![(s * 4 + k) as f32 * 1e-3; n + 4 * stagger])).collect();
        let mut data: Vec<[&mut [f32]; 4]> = backing
            .iter_mut()
            .map(|set| {
                let mut it = set.iter_mut().enumerate().map(|(k, v)| &mut v[k * stagger..k * stagger + n]);
                std::array::from_fn(|_| it.next().unwrap_or_default())
            })
            .collect();
        let reps = 300;
        let mut time = |form: usize| {
            let t = std::time::Instant::now();
            for r in 0..reps {
                let [a, g, v, _] = &mut data[r % sets];
                // A fresh buffer, as the allocator hands one back: last touched long ago.
                let mut fresh: Vec<f32> = Vec::with_capacity(n);
                let fresh_out = OutBase(fresh.spare_capacity_mut().as_mut_ptr());
                let g_out = OutBase(g.as_mut_ptr().cast::<MaybeUninit<f32>>());
                let one = Src::Single(0.9f32);
                // SAFETY: whole buffers of n floats, `Src::Out` ones initialized.
                let finite = unsafe {
                    match form {
                        0 => {
                            let srcs = [one, Src::Full(Cow::Borrowed(&a[..])), Src::Out(0)];
                            let f1 = region(&accum, &allocate(&accum, &[1]), &srcs, &[1], &[g_out], 0, n, 1);
                            let srcs =
                                [Src::Full(Cow::Borrowed(&v[..])), Src::Single(0.1), Src::Full(Cow::Borrowed(&g[..]))];
                            f1 & region(&update, &allocate(&update, &[1]), &srcs, &[1], &[fresh_out], 0, n, 1)
                        }
                        _ => {
                            let srcs = [
                                one,
                                Src::Full(Cow::Borrowed(&a[..])),
                                Src::Out(if form == 1 { 0 } else { 1 }),
                                Src::Full(Cow::Borrowed(&v[..])),
                                Src::Single(0.1),
                            ];
                            let outs = if form == 1 { [g_out, fresh_out] } else { [fresh_out, g_out] };
                            region(&merged, &allocate(&merged, &[3, 1]), &srcs, &[3, 1], &outs, 0, n, 3) & 1
                        }
                    }
                };
                assert_eq!(finite, 1);
                // SAFETY: every element was written above.
                unsafe { fresh.set_len(n) };
                drop(std::hint::black_box(fresh));
            }
            t.elapsed().as_secs_f64() / reps as f64 * 1e6
        };
        let mut best = [f64::MAX; 3];
        for _ in 0..3 {
            for (form, b) in best.iter_mut().enumerate() {
                *b = b.min(time(form));
            }
        }
        eprintln!(
            "two passes {:.1} us; merged, v' over g {:.1} us; merged, a' over g {:.1} us",
            best[0], best[1], best[2]
        );
    }
}
