//! The optimizers' own update programs as single loops, every value in registers.
//!
//! `_FusedElementwise` interprets its program one instruction at a time over chunks in L1:
//! each instruction loads its operands and stores its result, and each output is copied
//! out of its chunk. For an optimizer's update those passes, not memory, bound the op
//! (profiled at one pinned thread on a Zen 5): the MLP's momentum update of a 784 × 256
//! kernel took 60–62 µs as four instructions and two copies and 37–41 µs as one loop, the
//! CNN's SGD update of a 5408 × 64 kernel 55–57 and 37–38 µs, the residual model's Adam
//! update of a 3136 × 64 kernel 287–309 and 144–150 µs. So the programs that SGD,
//! momentum, Nesterov momentum, Adam and AdamW lower to (`engine_graph::optimizer`, after
//! `FuseElementwise` and `MergeElementwise`) are recognized here and run as one loop each,
//! with the same operations in the same order (no contraction into fused multiply-adds),
//! so the bits are the interpreter's; every other program is left to it.
//!
//! A test on the real pass pipeline (`the_optimizers_programs_are_recognized`) keeps the
//! patterns in step with what the optimizers and the passes emit: a change there that a
//! pattern misses fails a test rather than sending the update back to the interpreter
//! unnoticed.

use super::{buffer::Elem, numerics::FiniteLanes, simd::multiversion};
use engine_graph::ops::{ElementOp, Instr, Operand};

/// An operand of a pattern: a single-element input, a full-size one, an earlier
/// instruction's result, or nothing (a unary op's second).
#[derive(Clone, Copy)]
enum Pat {
    Single(usize),
    Full(usize),
    Temp(usize),
    None,
}

/// The most single and full inputs, and outputs, an update has (AdamW's).
const SINGLES: usize = 7;
const FULLS: usize = 4;
const OUTS: usize = 3;

/// Which update a program is, with its pattern: the instructions, and which instruction
/// each output is (output 0 first, as `FusedElementwise::output_temps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Update {
    /// `v' = v - lr g`.
    Sgd,
    /// `a' = m a + g; v' = v - lr a'`.
    Momentum,
    /// `a' = m a + g; v' = v - lr (g + m a')`.
    Nesterov,
    /// `m' = b1 m + (1 - b1) g; s' = b2 s + (1 - b2) g²; v' = v - lr m' / (sqrt(s') + eps)`.
    Adam,
    /// Adam with `v` first losing `rate v` (decoupled weight decay).
    AdamW,
}

impl Update {
    const ALL: [Update; 5] = [Update::Sgd, Update::Momentum, Update::Nesterov, Update::Adam, Update::AdamW];

    /// The instructions, in parts read one after the other, and the outputs. Singles:
    /// `lr` is 0 and `m` (or `b1`) is 1, then Adam's `1 - b1`, `b2`, `1 - b2`, `eps` and
    /// AdamW's `rate`; fulls: `g` is 0, `v` 1, `a` (or `m`) 2 and Adam's `s` 3.
    fn pattern(self) -> (&'static [&'static [Step]], &'static [usize]) {
        use ElementOp::*;
        use Pat::*;
        match self {
            Update::Sgd => (&[&[(Mul, Single(0), Full(0)), (Sub, Full(1), Temp(0))]], &[1]),
            Update::Momentum => (
                &[&[
                    (Mul, Single(1), Full(2)),
                    (Add, Temp(0), Full(0)),
                    (Mul, Single(0), Temp(1)),
                    (Sub, Full(1), Temp(2)),
                ]],
                &[3, 1],
            ),
            Update::Nesterov => (
                &[&[
                    (Mul, Single(1), Full(2)),
                    (Add, Temp(0), Full(0)),
                    (Mul, Single(1), Temp(1)),
                    (Add, Full(0), Temp(2)),
                    (Mul, Single(0), Temp(3)),
                    (Sub, Full(1), Temp(4)),
                ]],
                &[5, 1],
            ),
            Update::Adam => (
                &[
                    ADAM_MOMENTS,
                    &[
                        (Sqrt, Temp(3), None),
                        (Add, Temp(7), Single(5)),
                        (Div, Temp(6), Temp(8)),
                        (Mul, Single(0), Temp(9)),
                        (Sub, Full(1), Temp(10)),
                    ],
                ],
                &[11, 6, 3],
            ),
            Update::AdamW => (
                &[
                    ADAM_MOMENTS,
                    &[
                        (Mul, Full(1), Single(6)),
                        (Sub, Full(1), Temp(7)),
                        (Sqrt, Temp(3), None),
                        (Add, Temp(9), Single(5)),
                        (Div, Temp(6), Temp(10)),
                        (Mul, Single(0), Temp(11)),
                        (Sub, Temp(8), Temp(12)),
                    ],
                ],
                &[13, 6, 3],
            ),
        }
    }
}

/// One instruction of a pattern.
type Step = (ElementOp, Pat, Pat);

/// Adam's and AdamW's first seven instructions: `s' = b2 s + (1 - b2) g²` (t3) and
/// `m' = b1 m + (1 - b1) g` (t6).
const ADAM_MOMENTS: &[Step] = {
    use ElementOp::*;
    use Pat::*;
    &[
        (Mul, Single(3), Full(3)),
        (Square, Full(0), None),
        (Mul, Single(4), Temp(1)),
        (Add, Temp(0), Temp(2)),
        (Mul, Single(1), Full(2)),
        (Mul, Single(2), Full(0)),
        (Add, Temp(4), Temp(5)),
    ]
};

/// A program matched to an update: the inputs its singles and fulls are (in
/// [`Update::pattern`]'s order), unused ones `None`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Matched {
    pub update: Update,
    pub singles: [Option<usize>; SINGLES],
    pub fulls: [Option<usize>; FULLS],
}

/// Which update `program` (with outputs `outputs`) is, if any: `single(k)` says whether
/// input `k` is one element broadcast over the others.
pub(super) fn recognize(program: &[Instr], outputs: &[usize], single: impl Fn(usize) -> bool) -> Option<Matched> {
    Update::ALL.into_iter().find_map(|update| {
        let (parts, outs) = update.pattern();
        if parts.iter().map(|p| p.len()).sum::<usize>() != program.len() || outs != outputs {
            return None;
        }
        let mut m = Matched { update, singles: [None; SINGLES], fulls: [None; FULLS] };
        for (&(op, a, b), ins) in parts.iter().copied().flatten().zip(program) {
            let unary = ins.op.arity() == 1;
            if ins.op != op
                || !bind(&mut m, a, ins.args[0], &single)
                || !(unary || bind(&mut m, b, ins.args[1], &single))
            {
                return None;
            }
        }
        Some(m)
    })
}

/// Whether `operand` can be pattern operand `p`, binding `p`'s input on first sight.
fn bind(m: &mut Matched, p: Pat, operand: Operand, single: &impl Fn(usize) -> bool) -> bool {
    let (slot, k, want_single) = match (p, operand) {
        (Pat::Temp(t), Operand::Temp(u)) => return t == u,
        (Pat::Single(i), Operand::Input(k)) => (m.singles.get_mut(i), k, true),
        (Pat::Full(i), Operand::Input(k)) => (m.fulls.get_mut(i), k, false),
        _ => return false,
    };
    match slot {
        Some(slot) if single(k) == want_single => *slot.get_or_insert(k) == k,
        _ => false,
    }
}

/// Where a loop reads and writes: the singles' values, the fulls' and the outputs' first
/// elements. An output may be the buffer of a full input it replaces: each block of it is
/// read before that block is written.
pub(super) struct Streams<E> {
    pub singles: [E; SINGLES],
    pub fulls: [*const E; FULLS],
    pub outs: [*mut E; OUTS],
}

/// Runs `update` over `len` elements of `s`; returns `asked` with the bits of outputs
/// found not finite cleared.
///
/// # Safety
/// Every pointer the update uses is valid for `len` elements (reads for fulls, writes for
/// outputs), and an output overlaps a full only as the same buffer.
pub(super) unsafe fn run<E: Elem>(update: Update, s: &Streams<E>, len: usize, asked: u64) -> u64 {
    let finite = match update {
        // SAFETY: the caller's promise, for the streams each update reads and writes.
        Update::Sgd => u64::from(unsafe { sgd(s.singles[0], s.fulls[0], s.fulls[1], s.outs[0], len) }),
        Update::Momentum | Update::Nesterov => {
            // SAFETY: as above.
            let (v, a) = unsafe {
                momentum(
                    [s.singles[0], s.singles[1]],
                    [s.fulls[0], s.fulls[1], s.fulls[2]],
                    [s.outs[0], s.outs[1]],
                    len,
                    update == Update::Nesterov,
                )
            };
            u64::from(v) | u64::from(a) << 1
        }
        Update::Adam | Update::AdamW => {
            // SAFETY: as above.
            let [v, m, s2] = unsafe { adam(s.singles, s.fulls, s.outs, len, update == Update::AdamW) };
            u64::from(v) | u64::from(m) << 1 | u64::from(s2) << 2
        }
    };
    asked & finite
}

/// Elements `i..i + 16` of `p`, read as one block.
///
/// # Safety
/// `p` is valid for reads of `i + 16` elements.
#[inline(always)]
unsafe fn load<E: Elem>(p: *const E, i: usize) -> [E; 16] {
    // SAFETY: the caller's promise; unaligned, since a buffer starts anywhere.
    unsafe { p.add(i).cast::<[E; 16]>().read_unaligned() }
}

/// Writes `x` over elements `i..i + 16` of `p`.
///
/// # Safety
/// `p` is valid for writes of `i + 16` elements.
#[inline(always)]
unsafe fn store<E: Elem>(p: *mut E, i: usize, x: [E; 16]) {
    // SAFETY: as `load`'s.
    unsafe { p.add(i).cast::<[E; 16]>().write_unaligned(x) }
}

/// `v - lr g`.
#[inline(always)]
fn sgd_step<E: Elem>(lr: E, g: E, v: E) -> E {
    v - lr * g
}

/// `(v', a')`: `a' = m a + g`, `v' = v - lr a'` (Nesterov: `v - lr (g + m a')`).
#[inline(always)]
fn momentum_step<E: Elem>(lr: E, m: E, nesterov: bool, g: E, v: E, a: E) -> (E, E) {
    let acc = m * a + g;
    (v - lr * if nesterov { g + m * acc } else { acc }, acc)
}

/// `(v', m', s')` of Adam (AdamW's with `decay`), in the program's order of operations.
#[inline(always)]
fn adam_step<E: Elem>(c: [E; SINGLES], decay: bool, g: E, v: E, m: E, s: E) -> (E, E, E) {
    let [lr, b1, c1, b2, c2, eps, rate] = c;
    let s2 = b2 * s + c2 * (g * g);
    let m2 = b1 * m + c1 * g;
    let base = if decay { v - v * rate } else { v };
    (base - lr * (m2 / (s2.sqrt() + eps)), m2, s2)
}

// The loops below take whole blocks of sixteen elements, then the rest one by one. A
// block reads all its operands before it writes (an output may be an input's buffer), so
// the compiler vectorizes it with no alias checks: loading and storing element by element,
// it checked the output against each input at run time, found the replaced one
// overlapping and ran scalar. Blocks with a variable length, and blocks handed to a helper
// as a closure, were compiled into copies through the stack and calls (two to five times
// as slow as the interpreter), so each loop is written out.

multiversion! {
    /// `out = v - lr g`; whether every value written is finite.
    ///
    /// # Safety
    /// As [`run`]'s, for `g`, `v` and `out`.
    unsafe fn sgd<E: Elem>(lr: E, g: *const E, v: *const E, out: *mut E, len: usize) -> bool {
        let mut lanes = FiniteLanes::new();
        let mut i = 0;
        while i + 16 <= len {
            // SAFETY: `i + 16 <= len`; the caller's promise.
            let (gb, vb) = unsafe { (load(g, i), load(v, i)) };
            let mut w = [E::zero(); 16];
            for k in 0..16 {
                w[k] = sgd_step(lr, gb[k], vb[k]);
                lanes.note(k, w[k]);
            }
            // SAFETY: as above.
            unsafe { store(out, i, w) };
            i += 16;
        }
        for k in 0..len - i {
            // SAFETY: `i + k < len`; the caller's promise. The reads come first.
            unsafe {
                let w = sgd_step(lr, g.add(i + k).read(), v.add(i + k).read());
                out.add(i + k).write(w);
                lanes.note(k, w);
            }
        }
        lanes.finite()
    }
}

multiversion! {
    /// `a' = m a + g`, then `v' = v - lr a'` (or `v - lr (g + m a')`); whether each output
    /// is all finite.
    ///
    /// # Safety
    /// As [`run`]'s, for every stream.
    unsafe fn momentum<E: Elem>(singles: [E; 2], fulls: [*const E; 3], outs: [*mut E; 2], len: usize, nesterov: bool) -> (bool, bool) {
        let ([lr, m], [g, v, a], [v_out, a_out]) = (singles, fulls, outs);
        let (mut lanes_v, mut lanes_a) = (FiniteLanes::new(), FiniteLanes::new());
        let mut i = 0;
        while i + 16 <= len {
            // SAFETY: `i + 16 <= len`; the caller's promise.
            let (gb, vb, ab) = unsafe { (load(g, i), load(v, i), load(a, i)) };
            let (mut w, mut acc) = ([E::zero(); 16], [E::zero(); 16]);
            for k in 0..16 {
                (w[k], acc[k]) = momentum_step(lr, m, nesterov, gb[k], vb[k], ab[k]);
                lanes_v.note(k, w[k]);
                lanes_a.note(k, acc[k]);
            }
            // SAFETY: as above; every read of the block is done.
            unsafe {
                store(a_out, i, acc);
                store(v_out, i, w);
            }
            i += 16;
        }
        for k in 0..len - i {
            // SAFETY: `i + k < len`; the caller's promise. The reads come first.
            unsafe {
                let (w, acc) = momentum_step(lr, m, nesterov, g.add(i + k).read(), v.add(i + k).read(), a.add(i + k).read());
                a_out.add(i + k).write(acc);
                v_out.add(i + k).write(w);
                lanes_v.note(k, w);
                lanes_a.note(k, acc);
            }
        }
        (lanes_v.finite(), lanes_a.finite())
    }
}

multiversion! {
    /// Adam's (AdamW's with `decay`) `v'`, `m'` and `s'`; whether each is all finite.
    ///
    /// # Safety
    /// As [`run`]'s, for every stream.
    unsafe fn adam<E: Elem>(
        c: [E; SINGLES],
        fulls: [*const E; FULLS],
        outs: [*mut E; OUTS],
        len: usize,
        decay: bool,
    ) -> [bool; 3] {
        let [g, v, m, s] = fulls;
        let [v_out, m_out, s_out] = outs;
        let mut lanes = [FiniteLanes::new(); 3];
        let mut i = 0;
        while i + 16 <= len {
            // SAFETY: `i + 16 <= len`; the caller's promise.
            let (gb, vb, mb, sb) = unsafe { (load(g, i), load(v, i), load(m, i), load(s, i)) };
            let mut r = [[E::zero(); 16]; 3];
            for k in 0..16 {
                (r[0][k], r[1][k], r[2][k]) = adam_step(c, decay, gb[k], vb[k], mb[k], sb[k]);
                for j in 0..3 {
                    lanes[j].note(k, r[j][k]);
                }
            }
            // SAFETY: as above; every read of the block is done.
            unsafe {
                store(v_out, i, r[0]);
                store(m_out, i, r[1]);
                store(s_out, i, r[2]);
            }
            i += 16;
        }
        for k in 0..len - i {
            // SAFETY: `i + k < len`; the caller's promise. The reads come first.
            unsafe {
                let at = i + k;
                let (w, m2, s2) = adam_step(c, decay, g.add(at).read(), v.add(at).read(), m.add(at).read(), s.add(at).read());
                v_out.add(at).write(w);
                m_out.add(at).write(m2);
                s_out.add(at).write(s2);
                for (lanes, x) in lanes.iter_mut().zip([w, m2, s2]) {
                    lanes.note(k, x);
                }
            }
        }
        lanes.map(|l| l.finite())
    }
}

/// `update`'s program with its inputs numbered in an order of its own (fulls and singles
/// interleaved, as the fusion passes number them), its outputs, and whether each input
/// is a single: for tests that run the loop against the interpreter.
#[cfg(test)]
pub(super) fn example(update: Update) -> (Vec<Instr>, Vec<usize>, Vec<bool>) {
    let (parts, outputs) = update.pattern();
    let mut inputs: Vec<Pat> = Vec::new();
    let mut number = |p: Pat| -> Operand {
        let key = |p: &Pat| match p {
            Pat::Single(i) => (0, *i),
            Pat::Full(i) => (1, *i),
            _ => (2, 0),
        };
        let k = inputs.iter().position(|q| key(q) == key(&p)).unwrap_or_else(|| {
            inputs.push(p);
            inputs.len() - 1
        });
        Operand::Input(k)
    };
    let program = parts
        .iter()
        .copied()
        .flatten()
        .map(|&(op, a, b)| {
            let mut operand = |p: Pat| match p {
                Pat::Temp(t) => Operand::Temp(t),
                Pat::None => Operand::Input(0),
                p => number(p),
            };
            let a = operand(a);
            Instr { op, args: [a, operand(b)] }
        })
        .collect();
    let singles = inputs.iter().map(|p| matches!(p, Pat::Single(_))).collect();
    (program, outputs.to_vec(), singles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_graph::{
        DType, Graph, GraphBuilder, Initializer, Op, Shape,
        autodiff::Autodiff,
        ops::is_single,
        optimizer::{ApplyOptimizer, Optimizer, OptimizerConfig},
        passes::{CheckNumericsPass, PassManager, optimization_passes},
    };

    /// The fused update of every variable of a small dense model, trained with
    /// `optimizer` through the estimator's passes: what each one is recognized as.
    fn recognized(optimizer: Optimizer) -> engine_graph::Result<Vec<(String, Option<Update>)>> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[8]))?;
        let w = b.variable("w", &[8, 4], Initializer::GlorotUniform, true)?;
        let bias = b.variable("b", &[4], Initializer::Zeros, true)?;
        let y = b.matmul(x, w)?;
        let y = b.add(y, bias)?;
        let y = b.square(y)?;
        let loss = b.reduce_mean(y, &[], false)?;
        g.roles.loss = Some(loss);
        g.roles.inputs.insert("x".into(), x);
        let mut passes = PassManager::new()
            .with(Autodiff)
            .with(ApplyOptimizer { config: OptimizerConfig::constant(optimizer, 0.1) })
            .with(CheckNumericsPass);
        for p in optimization_passes() {
            passes.push(p);
        }
        passes.run(&mut g)?;
        let mut found = Vec::new();
        for (_, node) in g.nodes() {
            let Op::FusedElementwise(f) = &node.op else { continue };
            if !node.name.contains("/update_") {
                continue;
            }
            let singles: Vec<bool> =
                node.inputs.iter().map(|&o| g.fact(o).map(is_single)).collect::<engine_graph::Result<_>>()?;
            let outputs: Vec<usize> = f.output_temps().collect();
            let update = recognize(&f.program, &outputs, |k| singles.get(k).copied().unwrap_or(false));
            found.push((node.name.clone(), update.map(|m| m.update)));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }

    /// What the optimizers and the fusion passes emit is what the loops expect: a change
    /// to either that a pattern misses fails here, rather than sending the update back to
    /// the interpreter unnoticed. RMSProp and Adagrad have no loop of their own.
    #[test]
    fn the_optimizers_programs_are_recognized() -> engine_graph::Result<()> {
        let sgd = |momentum, nesterov| Optimizer::Sgd { momentum, nesterov };
        let adam = Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 };
        for (optimizer, want) in [
            (sgd(0.0, false), Some(Update::Sgd)),
            (sgd(0.9, false), Some(Update::Momentum)),
            (sgd(0.9, true), Some(Update::Nesterov)),
            (adam, Some(Update::Adam)),
            (Optimizer::AdamW { beta1: 0.9, beta2: 0.999, epsilon: 1e-7, weight_decay: 0.01 }, Some(Update::AdamW)),
            (Optimizer::Adagrad { initial_accumulator: 0.1, epsilon: 1e-7 }, None),
        ] {
            let found = recognized(optimizer.clone())?;
            assert_eq!(found.len(), 2, "{optimizer:?}: {found:?}");
            for (name, update) in found {
                assert_eq!(update, want, "{optimizer:?}: {name}");
            }
        }
        Ok(())
    }

    /// A pattern input read twice must be one input both times; an op, an operand's kind,
    /// the outputs or the length differing anywhere is not the update either. (Two
    /// pattern inputs bound to one input are fine: the loop then reads it for both.)
    #[test]
    fn a_program_that_differs_anywhere_is_not_recognized() {
        let (program, outputs, singles) = example(Update::Nesterov);
        let single = |k: usize| singles.get(k).copied().unwrap_or(false);
        assert_eq!(recognize(&program, &outputs, single).map(|m| m.update), Some(Update::Nesterov));
        // `g + m a'` reading `v` where the pattern reads `g` again.
        let mut other = program.clone();
        other[3].args[0] = program[5].args[0];
        assert_eq!(recognize(&other, &outputs, single), None);
        // The last `Sub` an `Add`.
        let mut other = program.clone();
        other[5].op = ElementOp::Add;
        assert_eq!(recognize(&other, &outputs, single), None);
        // Every input a single.
        assert_eq!(recognize(&program, &outputs, |_| true), None);
        // Another output set, one instruction more.
        assert_eq!(recognize(&program, &[5], single), None);
        let mut longer = program.clone();
        longer.push(Instr { op: ElementOp::Neg, args: [Operand::Temp(5), Operand::Temp(5)] });
        assert_eq!(recognize(&longer, &[6, 1], single), None);
    }
}
