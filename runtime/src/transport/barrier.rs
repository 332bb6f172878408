//! Barrier: an empty segment from every member to every other. One hop, so it costs one
//! message latency.

use super::operation::Op;
use crate::Result;
use bytes::Bytes;

pub(super) fn barrier(op: &Op) -> Result<()> {
    let (n, me) = (op.size(), op.rank());
    let peers: Vec<usize> = (0..n).filter(|&p| p != me).collect();
    for &peer in &peers {
        op.send(peer, 0, 0, Bytes::new())?;
    }
    let arrived = op.receive_all(&peers.iter().map(|&p| (p, 0, 0)).collect::<Vec<_>>())?;
    for (&peer, segment) in peers.iter().zip(&arrived) {
        op.expect_bytes(peer, segment, 0)?;
    }
    Ok(())
}
