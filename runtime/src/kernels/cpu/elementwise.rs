//! Elementwise arithmetic with NumPy broadcasting, writing in place when the executor
//! handed over the last reference to the left operand.
//!
//! Broadcasting is resolved to one of three shapes of loop, which cover what models
//! produce: equal shapes, a trailing block repeated (a bias `[c]` against `[n, h, w, c]`,
//! a row `[1, c]` against `[n, c]`) and a scalar. Anything else goes to burn.

use super::{
    Outcome,
    buffer::{Elem, into_vec, tensor, view},
};
use crate::{Result, Value, kernels::{KernelCtx, dims}, value::T};
use engine_graph::Op;
use rayon::prelude::*;

const PARALLEL_MIN: usize = 1 << 16;

#[derive(Clone, Copy)]
enum Kind {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
}

impl Kind {
    #[inline(always)]
    fn apply<E: Elem>(self, a: E, b: E) -> E {
        match self {
            Kind::Add => a + b,
            Kind::Sub => a - b,
            Kind::Mul => a * b,
            Kind::Div => a / b,
            // Ties keep `a`, as the gradient rule assumes.
            Kind::Max => if b > a { b } else { a },
            Kind::Min => if b < a { b } else { a },
        }
    }
}

/// How `b` repeats over `a` (or the reverse): the length of the repeating block.
fn trailing_block(big: &[usize], small: &[usize]) -> Option<usize> {
    let small: Vec<usize> = small.iter().copied().skip_while(|&d| d == 1).collect();
    if small.len() > big.len() || big[big.len() - small.len()..] != small[..] {
        return None;
    }
    Some(small.iter().product())
}

pub(super) fn binary<E: Elem>(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Outcome {
    let kind = match op {
        Op::Add(_) => Kind::Add,
        Op::Sub(_) => Kind::Sub,
        Op::Mul(_) => Kind::Mul,
        Op::Div(_) => Kind::Div,
        Op::Maximum(_) => Kind::Max,
        Op::Minimum(_) => Kind::Min,
        _ => return Err(inputs),
    };
    let (Some(Value::Float(a)), Some(Value::Float(b))) = (inputs.first(), inputs.get(1)) else { return Err(inputs) };
    let (ad, bd) = (dims(a), dims(b));
    let (an, bn) = (ad.iter().product::<usize>(), bd.iter().product::<usize>());
    let out = match ctx.out_shape(0) {
        Ok(o) => o,
        Err(e) => return Ok(Err(e)),
    };
    let on: usize = out.iter().product();
    // The left operand must fill the output (then it can be the output buffer), or the
    // right one must (then loop over it, with `a` repeating).
    let a_fills = an == on && trailing_block(&out, &bd).is_some_and(|blk| blk > 0 && on % blk == 0);
    let b_fills = bn == on && trailing_block(&out, &ad).is_some_and(|blk| blk > 0 && on % blk == 0);
    if !a_fills && !b_fills {
        return Err(inputs);
    }
    let mut it = inputs.into_iter();
    let (Some(Value::Float(a)), Some(Value::Float(b))) = (it.next(), it.next()) else { return Ok(Err(ctx.err("missing input"))) };
    Ok(Ok(vec![Value::Float(if a_fills {
        let mut data = into_vec::<E>(a);
        let small = view::<E>(&b);
        apply_repeating(&mut data, &small, |x, y| kind.apply(x, y));
        tensor(data, &out, ctx.device)
    } else {
        let mut data = into_vec::<E>(b);
        let small = view::<E>(&a);
        apply_repeating(&mut data, &small, |y, x| kind.apply(x, y));
        tensor(data, &out, ctx.device)
    })]))
}

/// `big[i] = f(big[i], small[i % small.len()])`.
fn apply_repeating<E: Elem>(big: &mut [E], small: &[E], f: impl Fn(E, E) -> E + Sync) {
    let blk = small.len().max(1);
    let body = |chunk: &mut [E]| {
        for row in chunk.chunks_mut(blk) {
            if small.len() == 1 {
                row.iter_mut().for_each(|x| *x = f(*x, small[0]));
            } else {
                row.iter_mut().zip(small).for_each(|(x, y)| *x = f(*x, *y));
            }
        }
    };
    if big.len() >= PARALLEL_MIN {
        let per = (big.len() / rayon::current_num_threads().max(1)).div_ceil(blk).max(1) * blk;
        big.par_chunks_mut(per).for_each(body);
    } else {
        body(big);
    }
}

/// `Relu(x)` and `ReluGrad(y, dy)`, in place.
pub(super) fn relu<E: Elem>(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let shape = ctx.out_shape(0)?;
    match op {
        Op::Relu(_) => {
            let [x] = ctx.floats(inputs)?;
            let mut data = into_vec::<E>(x);
            map_in_place(&mut data, |v| if v > E::zero() { v } else { E::zero() });
            Ok(tensor(data, &shape, ctx.device))
        }
        _ => {
            let [y, dy] = ctx.floats(inputs)?;
            let ys = view::<E>(&y);
            let mut data = into_vec::<E>(dy);
            if ys.len() != data.len() {
                return Err(ctx.err("output and gradient sizes differ"));
            }
            let body = |(d, y): (&mut [E], &[E])| d.iter_mut().zip(y).for_each(|(d, y)| if *y <= E::zero() { *d = E::zero() });
            if data.len() >= PARALLEL_MIN {
                let per = data.len().div_ceil(rayon::current_num_threads().max(1));
                data.par_chunks_mut(per).zip(ys.par_chunks(per)).for_each(body);
            } else {
                body((&mut data, &ys));
            }
            Ok(tensor(data, &shape, ctx.device))
        }
    }
}

fn map_in_place<E: Elem>(data: &mut [E], f: impl Fn(E) -> E + Sync) {
    if data.len() >= PARALLEL_MIN {
        let per = data.len().div_ceil(rayon::current_num_threads().max(1));
        data.par_chunks_mut(per).for_each(|c| c.iter_mut().for_each(|v| *v = f(*v)));
    } else {
        data.iter_mut().for_each(|v| *v = f(*v));
    }
}
