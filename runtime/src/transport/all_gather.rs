//! All-gather: every member sends its tensor to every other; the result is the tensors
//! concatenated in rank order. Members may pass different lengths: each learns the others'
//! from the first segment they send.

use super::operation::Op;
use super::wire::{decode_into, elements_per_segment, encode, pieces};
use crate::Result;

pub(super) fn all_gather(op: &Op, data: &[f32]) -> Result<Vec<f32>> {
    let (n, me) = (op.size(), op.rank());
    let per_segment = elements_per_segment::<f32>();
    for (index, part) in pieces(0..data.len(), per_segment).into_iter().enumerate() {
        let payload = encode(&data[part]);
        for peer in (0..n).filter(|&p| p != me) {
            op.send(peer, 0, index as u32, payload.clone())?;
        }
    }
    // First segment from everyone at once, so that a timeout names every absent member.
    let peers: Vec<usize> = (0..n).filter(|&p| p != me).collect();
    let firsts = op.receive_all(&peers.iter().map(|&p| (p, 0, 0)).collect::<Vec<_>>())?;
    let mut gathered: Vec<Vec<f32>> = vec![Vec::new(); n];
    gathered[me] = data.to_vec();
    for (&peer, first) in peers.iter().zip(firsts) {
        // The sender's claimed length only decides which segments to wait for; memory
        // grows with what actually arrives, so a wrong length cannot make this allocate.
        let len = usize::try_from(first.header.tensor_len).unwrap_or(usize::MAX);
        let count = len.div_ceil(per_segment).max(1);
        if u32::try_from(count).is_err() {
            return Err(op.error(format!("{} claims a tensor of {len} elements", op.members.describe(peer)), false));
        }
        let mut segment = first;
        let out = &mut gathered[peer];
        for index in 0..count {
            if index > 0 {
                segment = op.receive(peer, 0, index as u32)?;
            }
            let part = index * per_segment..((index + 1) * per_segment).min(len);
            op.expect_bytes(peer, &segment, part.len() * 4)?;
            out.resize(part.end, 0.0);
            decode_into(&segment.payload, &mut out[part]);
        }
    }
    Ok(gathered.concat())
}
