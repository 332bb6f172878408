//! All-reduce over the network, with two algorithms chosen by size.
//!
//! Both give every member bit-identical results (members apply the same update to their
//! own copy of the variables, so a one-ulp difference would make the replicas drift), and
//! both add in the order the in-process ring does: element `i` of chunk `c` (the chunks of
//! [`chunk`]) is `x[c-1] + (x[c-2] + (… + (x[c+1] + x[c])))`, ranks taken modulo the
//! group size.
//!
//! - **Direct**, for small tensors: every member sends its whole tensor to every other and
//!   sums all of them itself, in f64, in that order. One network hop, so latency is one
//!   message; the sum is the in-process group's to the bit, for f32 and f64.
//! - **Ring**, for large ones: reduce-scatter then all-gather around the ring, each chunk
//!   cut in ~1 MiB segments that are forwarded as soon as they are reduced, so the steps
//!   overlap. Each member sends `2 (n-1)/n` of the tensor whatever `n`. The chunk owner's
//!   sum reaches everyone by copy, so all members agree; partial sums travel in the
//!   tensor's own type, so for f32 with three or more members the result can differ from
//!   the in-process group's (which keeps partial sums in f64) in the last bits.

use super::operation::Op;
use super::wire::{Element, accumulate_from, decode_into, elements_per_segment, encode, pieces};
use crate::Result;
use crate::collective::{chunk, finish};
use engine_graph::ops::ReduceOp;
use std::ops::Range;

/// Below this many bytes the direct algorithm's single hop beats the ring's `2 (n-1)`.
pub(super) const DIRECT_BELOW_BYTES: usize = 64 << 10;

pub(super) fn all_reduce<E: Element>(op: &Op, data: &mut [E], reduce: ReduceOp) -> Result<()> {
    if data.len() * E::BYTES < DIRECT_BELOW_BYTES { direct(op, data, reduce) } else { ring(op, data, reduce) }
}

fn chunk_range(len: usize, n: usize, c: usize) -> Range<usize> {
    let (start, end) = chunk(len, n, c);
    start..end
}

fn direct<E: Element>(op: &Op, data: &mut [E], reduce: ReduceOp) -> Result<()> {
    let (n, me) = (op.size(), op.rank());
    let parts = pieces(0..data.len(), elements_per_segment::<E>());
    for (index, part) in parts.iter().enumerate() {
        let payload = encode(&data[part.clone()]);
        for peer in (0..n).filter(|&p| p != me) {
            op.send(peer, 0, index as u32, payload.clone())?;
        }
    }
    let wanted: Vec<(usize, u32, u32)> =
        (0..n).filter(|&p| p != me).flat_map(|p| (0..parts.len()).map(move |i| (p, 0, i as u32))).collect();
    let arrived = op.receive_all(&wanted)?;
    let mut contributions: Vec<Vec<E>> = vec![Vec::new(); n];
    contributions[me] = data.to_vec();
    for (&(from, _, index), segment) in wanted.iter().zip(&arrived) {
        let part = &parts[index as usize];
        op.expect_bytes(from, segment, part.len() * E::BYTES)?;
        let out = &mut contributions[from];
        out.resize(data.len(), E::default());
        decode_into(&segment.payload, &mut out[part.clone()]);
    }
    let scale = if reduce == ReduceOp::Mean { n as f64 } else { 1.0 };
    for c in 0..n {
        for i in chunk_range(data.len(), n, c) {
            let mut sum = contributions[c][i].widen();
            for step in 1..n {
                sum += contributions[(c + step) % n][i].widen();
            }
            // `finish` on the f64 sum, then narrowing: what the in-process group does.
            data[i] = E::narrow(if scale != 1.0 { sum / scale } else { sum });
        }
    }
    Ok(())
}

fn ring<E: Element>(op: &Op, data: &mut [E], reduce: ReduceOp) -> Result<()> {
    let (n, me) = (op.size(), op.rank());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let per_segment = elements_per_segment::<E>();
    let len = data.len();
    // Step s of the reduce-scatter sends chunk (me - s) and receives chunk (me - s - 1);
    // step n - 1 + t of the all-gather receives chunk (me - t). Segments of step s + 1 are
    // sent as soon as the matching segment of step s is reduced.
    for (index, part) in pieces(chunk_range(len, n, me), per_segment).into_iter().enumerate() {
        op.send(right, 0, index as u32, encode(&data[part]))?;
    }
    for step in 0..n - 1 {
        let c = (me + n - step - 1) % n;
        for (index, part) in pieces(chunk_range(len, n, c), per_segment).into_iter().enumerate() {
            let segment = op.receive(left, step as u32, index as u32)?;
            op.expect_bytes(left, &segment, part.len() * E::BYTES)?;
            accumulate_from(&segment.payload, &mut data[part.clone()]);
            // At the last step this chunk is complete: it opens the all-gather.
            op.send(right, step as u32 + 1, index as u32, encode(&data[part]))?;
        }
    }
    for t in 0..n - 1 {
        let step = (n - 1 + t) as u32;
        let c = (me + n - t) % n;
        for (index, part) in pieces(chunk_range(len, n, c), per_segment).into_iter().enumerate() {
            let segment = op.receive(left, step, index as u32)?;
            op.expect_bytes(left, &segment, part.len() * E::BYTES)?;
            if t + 1 < n - 1 {
                // The received bytes are forwarded as they are: no re-encoding.
                op.send(right, step + 1, index as u32, segment.payload.clone())?;
            }
            decode_into(&segment.payload, &mut data[part]);
        }
    }
    finish(data, reduce, n);
    Ok(())
}

/// For tests: which algorithm a tensor of `len` elements of `E` gets.
#[cfg(test)]
pub(super) fn uses_ring<E: Element>(len: usize) -> bool {
    len * E::BYTES >= DIRECT_BELOW_BYTES
}
