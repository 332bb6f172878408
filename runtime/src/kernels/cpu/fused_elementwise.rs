//! `_FusedElementwise`: the program evaluated over chunks that stay in L1, written once.
//!
//! The output reuses the first full-size input the executor handed over for the last
//! time (a gradient, usually), so an optimizer update allocates at most its result.

use super::{
    Outcome,
    buffer::{Elem, into_vec, is_whole_and_unique, tensor, view},
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
        unsafe { &mut *(buf.as_mut_slice() as *mut [E] as *mut [MaybeUninit<E>]) }
    } else {
        &mut buf.spare_capacity_mut()[..n]
    };
    out.par_chunks_mut(per_task).enumerate().for_each(|(i, part)| region(&f.program, &srcs, i * per_task, part));
    if !reads_out {
        // SAFETY: `region` wrote every one of the first `n` elements (the chunks cover
        // `0..n`, and each chunk's elements are stored before it returns).
        unsafe { buf.set_len(n) };
    }
    Ok(Ok(vec![Value::Float(tensor(buf, &shape, ctx.device))]))
}

/// Elements `start..start + out.len()` of the result, into `out`, every element written.
/// `out` is initialized where a source is [`Src::Out`] (the buffer taken over from an
/// input), and may be uninitialized otherwise.
fn region<E: Elem>(program: &[Instr], srcs: &[Src<'_, E>], start: usize, out: &mut [MaybeUninit<E>]) {
    let mut temps = vec![[E::zero(); CHUNK]; program.len()];
    let singles: Vec<[E; CHUNK]> = srcs
        .iter()
        .map(|s| match s {
            Src::Single(v) => [*v; CHUNK],
            _ => [E::zero(); CHUNK],
        })
        .collect();
    let reads_out = srcs.iter().any(|s| matches!(s, Src::Out));
    for at in (0..out.len()).step_by(CHUNK) {
        let len = CHUNK.min(out.len() - at);
        {
            let out_chunk: &[E] = if reads_out {
                // SAFETY: with a `Src::Out` the buffer was an initialized input, and this
                // chunk has not been written yet.
                unsafe { &*(&out[at..at + len] as *const [MaybeUninit<E>] as *const [E]) }
            } else {
                &[]
            };
            let chunk = Chunk { srcs, singles: &singles, out: out_chunk, at: start + at, len };
            eval_chunk(program, &chunk, &mut temps);
        }
        if let Some(last) = temps.last() {
            for (o, v) in out[at..at + len].iter_mut().zip(&last[..len]) {
                o.write(*v);
            }
        }
    }
}

/// Where one chunk's operands are: `len` elements from `at` of each full source, the
/// broadcast singles, and the output buffer's own chunk. Resolved per instruction, with
/// no per-chunk list of slices to allocate.
struct Chunk<'c, 'a, E: Clone> {
    srcs: &'c [Src<'a, E>],
    singles: &'c [[E; CHUNK]],
    out: &'c [E],
    at: usize,
    len: usize,
}

impl<E: Elem> Chunk<'_, '_, E> {
    fn input(&self, k: usize) -> &[E] {
        match (self.srcs.get(k), self.singles.get(k)) {
            (Some(Src::Full(v)), _) => v.get(self.at..self.at + self.len).unwrap_or(&[]),
            (Some(Src::Single(_)), Some(single)) => &single[..self.len],
            (Some(Src::Out), _) => self.out,
            _ => &[],
        }
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
            let operand = |o: Operand| -> &[E] {
                match o {
                    Operand::Input(k) => chunk.input(k),
                    Operand::Temp(t) => done.get(t).map_or(&[][..], |t| &t[..len]),
                }
            };
            let a = operand(ins.args[0]);
            if ins.op.arity() == 1 {
                let each = out.iter_mut().zip(a);
                match ins.op {
                    ElementOp::Neg => each.for_each(|(o, x)| *o = -*x),
                    ElementOp::Exp => each.for_each(|(o, x)| *o = x.exp()),
                    ElementOp::Log => each.for_each(|(o, x)| *o = x.ln()),
                    ElementOp::Sqrt => each.for_each(|(o, x)| *o = x.sqrt()),
                    ElementOp::Relu => each.for_each(|(o, x)| *o = if *x > E::zero() { *x } else { E::zero() }),
                    _ => each.for_each(|(o, x)| *o = *x * *x),
                }
                continue;
            }
            let b = operand(ins.args[1]);
            let pairs = out.iter_mut().zip(a.iter().zip(b));
            match ins.op {
                ElementOp::Add => pairs.for_each(|(o, (x, y))| *o = *x + *y),
                ElementOp::Sub => pairs.for_each(|(o, (x, y))| *o = *x - *y),
                ElementOp::Mul => pairs.for_each(|(o, (x, y))| *o = *x * *y),
                ElementOp::Div => pairs.for_each(|(o, (x, y))| *o = *x / *y),
                // Ties keep `x`, as the unfused kernels do.
                ElementOp::Maximum => pairs.for_each(|(o, (x, y))| *o = if *y > *x { *y } else { *x }),
                ElementOp::ReluGrad => pairs.for_each(|(o, (y, dy))| *o = if *y > E::zero() { *dy } else { E::zero() }),
                _ => pairs.for_each(|(o, (x, y))| *o = if *y < *x { *y } else { *x }),
            }
        }
    }
}
