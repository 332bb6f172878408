//! All-reduce through the shared segment: a reduce-scatter and an all-gather in memory.
//!
//! The tensor is cut into rounds of `n` regions (one region per member, `region_bytes`
//! each); in every round member `r` owns region `r`:
//!
//! 1. it copies the regions it does not own into its slot, and publishes phase `2t - 1`;
//! 2. once everyone has, it sums its own region, reading its own values from its tensor and
//!    everyone else's from their slots, writes the sum into its tensor and into its own
//!    slot, and publishes phase `2t`;
//! 3. once everyone has, it copies each other member's sum out of that member's slot.
//!
//! So each element is summed by exactly one member and copied by the others: every
//! member gets the same bits. The sum is the in-process group's: in f64, in the ring's
//! order for the element's chunk (see `transport/all_reduce.rs`), and a mean is divided
//! before narrowing. One slot per member is enough without double buffering: step 1 of the
//! next round writes only regions that step 3 of this round does not read (a member's own
//! region is read in step 3, the others in step 2, which everyone finished before anyone
//! got past this round's second wait). Region boundaries are fixed in bytes, so successive
//! operations of any size keep that property.

use super::super::operation::Op;
use super::super::wire::Element;
use super::SharedMemory;
use super::wait::wait_for_phase;
use crate::collective::chunk;
use crate::{Result, RuntimeError};
use engine_graph::ops::ReduceOp;
use std::ops::Range;
use std::sync::atomic::Ordering;

/// Elements summed at a time: the f64 accumulator stays in L1.
const BLOCK: usize = 2048;

pub(in super::super) fn all_reduce<E: Element>(
    op: &Op,
    shm: &SharedMemory,
    data: &mut [E],
    reduce: ReduceOp,
) -> Result<()> {
    let segment = &shm.segment;
    let (n, me, len) = (op.size(), op.rank(), data.len());
    let per_region = segment.region_bytes() / E::BYTES;
    let per_round = per_region * n;
    let chunks: Vec<Range<usize>> = (0..n).map(|c| chunk(len, n, c)).map(|(s, e)| s..e).collect();
    let scale = if reduce == ReduceOp::Mean { n as f64 } else { 1.0 };
    let mut accumulator = vec![0f64; BLOCK];
    let rounds = len.div_ceil(per_round).max(1);
    for round in 0..rounds {
        let t = shm.rounds.fetch_add(1, Ordering::Relaxed) + 1;
        let base = round * per_round;
        let region = |j: usize| (base + j * per_region).min(len)..(base + (j + 1) * per_region).min(len);
        for j in (0..n).filter(|&j| j != me) {
            segment.write(me, j, 0, &data[region(j)]);
        }
        let control = segment.control(me);
        control.operation.store(op.operation, Ordering::Relaxed);
        control.kind.store(op.kind as u64, Ordering::Relaxed);
        control.tensor_len.store(len as u64, Ordering::Relaxed);
        segment.publish(me, 2 * t - 1);
        wait_for_phase(op, segment, 2 * t - 1)?;
        if round == 0 {
            same_operation_everywhere(op, shm, len)?;
        }
        let mine = region(me);
        for (c, chunk_range) in chunks.iter().enumerate() {
            let part = intersect(&mine, chunk_range);
            for block in (part.start..part.end).step_by(BLOCK) {
                let block = block..(block + BLOCK).min(part.end);
                let at = block.start - mine.start..block.end - mine.start;
                sum_block(op, shm, data, &block, &at, c, scale, &mut accumulator);
            }
        }
        segment.publish(me, 2 * t);
        wait_for_phase(op, segment, 2 * t)?;
        for j in (0..n).filter(|&j| j != me) {
            let range = region(j);
            let count = range.len();
            data[range].copy_from_slice(segment.read(j, j, count));
        }
    }
    Ok(())
}

fn intersect(a: &Range<usize>, b: &Range<usize>) -> Range<usize> {
    let start = a.start.max(b.start);
    start..a.end.min(b.end).max(start)
}

/// Sums `data[block]` (elements of chunk `c`; `at` is where they sit in each slot's region)
/// over the members, in the ring's order for chunk `c`: `x[c-1] + (… + (x[c+1] + x[c]))`,
/// into `data` and this member's own region.
#[allow(clippy::too_many_arguments)]
fn sum_block<E: Element>(
    op: &Op,
    shm: &SharedMemory,
    data: &mut [E],
    block: &Range<usize>,
    at: &Range<usize>,
    c: usize,
    scale: f64,
    accumulator: &mut [f64],
) {
    let (n, me) = (op.size(), op.rank());
    let acc = &mut accumulator[..block.len()];
    for step in 0..n {
        let k = (c + step) % n;
        let values: &[E] = if k == me { &data[block.clone()] } else { &shm.segment.read(k, me, at.end)[at.clone()] };
        if step == 0 {
            acc.iter_mut().zip(values).for_each(|(a, v)| *a = v.widen());
        } else {
            acc.iter_mut().zip(values).for_each(|(a, v)| *a += v.widen());
        }
    }
    let out = &mut data[block.clone()];
    if scale == 1.0 {
        out.iter_mut().zip(acc.iter()).for_each(|(o, a)| *o = E::narrow(*a));
    } else {
        out.iter_mut().zip(acc.iter()).for_each(|(o, a)| *o = E::narrow(*a / scale));
    }
    // For the others to copy, while the block is still in L1.
    shm.segment.write(me, me, at.start, out);
}

/// Refuses to go on when members run different operations or tensor sizes: their data
/// would mix silently.
fn same_operation_everywhere(op: &Op, shm: &SharedMemory, len: usize) -> Result<()> {
    let me = op.members.describe(op.rank());
    for k in (0..op.size()).filter(|&k| k != op.rank()) {
        let control = shm.segment.control(k);
        let (operation, kind, their_len) = (
            control.operation.load(Ordering::Relaxed),
            control.kind.load(Ordering::Relaxed),
            control.tensor_len.load(Ordering::Relaxed),
        );
        let peer = op.members.describe(k);
        if operation != op.operation || kind != op.kind as u64 {
            return Err(mismatch(
                op,
                format!(
                    "{peer} runs operation {operation} (kind {kind}) while {me} runs operation {} ({}): every task must call the same collectives in the same order",
                    op.operation,
                    op.kind.describe()
                ),
            ));
        }
        if their_len != len as u64 {
            return Err(mismatch(
                op,
                format!(
                    "{peer} passes {their_len} elements to operation {}, {me} passes {len}: every task must pass tensors of the same size",
                    op.operation
                ),
            ));
        }
    }
    Ok(())
}

fn mismatch(op: &Op, reason: String) -> RuntimeError {
    op.error(reason, false)
}
