//! Broadcast: the root sends its tensor, segment by segment, straight to every member.
//!
//! Segments carry the root as their step, so that a member that disagrees about the root
//! never takes another root's data for its own: the segments nobody expected are reported
//! when the operation ends.
//!
//! A star rather than a pipeline: groups are a handful of workers and broadcasts happen
//! once per run (initial variables), so the root's `n - 1` copies cost less than the
//! latency of a relay chain would.

use super::operation::Op;
use super::wire::{decode_into, elements_per_segment, encode, pieces};
use crate::Result;

pub(super) fn broadcast(op: &Op, data: &mut [f32], root: usize) -> Result<()> {
    let step = root as u32;
    let parts = pieces(0..data.len(), elements_per_segment::<f32>());
    if op.rank() == root {
        for (index, part) in parts.into_iter().enumerate() {
            let payload = encode(&data[part]);
            for peer in (0..op.size()).filter(|&p| p != root) {
                op.send(peer, step, index as u32, payload.clone())?;
            }
        }
        return Ok(());
    }
    for (index, part) in parts.into_iter().enumerate() {
        let segment = op.receive(root, step, index as u32)?;
        op.expect_bytes(root, &segment, part.len() * 4)?;
        decode_into(&segment.payload, &mut data[part]);
    }
    Ok(())
}
