//! One collective operation as the algorithms see it: send a tagged segment to a peer, and
//! wait, until the operation's deadline, for tagged segments from peers.
//!
//! Every way a wait can end badly ends here, with an error naming the task at fault: the
//! deadline passed (naming every peer whose segment is missing), a peer's connection broke,
//! a peer left, a peer runs a different collective or a different tensor size, the group
//! was aborted.

use super::mailbox::{Arrived, Header, Tag};
use super::members::Members;
use super::proto::{Frame, Segment, frame::Body};
use super::state::{Gone, Shared, State};
use super::wire::Kind;
use crate::{Result, RuntimeError};
use bytes::Bytes;
use std::time::{Duration, Instant};

/// How long a failed send waits for the reason its stream ended to be recorded.
const CAUSE_GRACE: Duration = Duration::from_millis(500);

pub(super) struct Op<'a> {
    pub members: &'a Members,
    pub shared: &'a Shared,
    /// This operation's sequence number, the same on every member.
    pub operation: u64,
    pub kind: Kind,
    /// This task's tensor length, sent with every segment.
    pub tensor_len: u64,
    /// Whether every member must pass a tensor of the same length (all but all-gather).
    pub same_len: bool,
    pub timeout: Duration,
    pub deadline: Instant,
}

impl Op<'_> {
    pub fn rank(&self) -> usize {
        self.members.me
    }

    pub fn size(&self) -> usize {
        self.members.size()
    }

    pub fn error(&self, reason: String, retryable: bool) -> RuntimeError {
        RuntimeError::Collective { op: self.kind.name().to_string(), reason, retryable }
    }

    /// Fails if the group was aborted before the operation started.
    pub fn check_alive(&self) -> Result<()> {
        let state = self.shared.lock();
        match &state.aborted {
            Some((reason, retryable)) => Err(self.aborted(reason, *retryable)),
            None => Ok(()),
        }
    }

    fn aborted(&self, reason: &str, retryable: bool) -> RuntimeError {
        self.error(format!("the group was aborted: {reason}"), retryable)
    }

    /// Queues a segment for `to`; it does not wait for the network.
    pub fn send(&self, to: usize, step: u32, index: u32, payload: Bytes) -> Result<()> {
        let segment = Segment {
            operation: self.operation,
            kind: self.kind as u32,
            step,
            index,
            sender: self.members.me as u32,
            tensor_len: self.tensor_len,
            payload,
        };
        let frame = Frame { body: Some(Body::Segment(segment)) };
        let mut state = self.shared.lock();
        if let Some((reason, retryable)) = &state.aborted {
            return Err(self.aborted(reason, *retryable));
        }
        let queued =
            state.peers.get(to).and_then(|peer| peer.outbound.as_ref()).is_some_and(|out| out.send(frame).is_ok());
        if queued {
            return Ok(());
        }
        // The stream ended a moment ago; the task that saw it end is about to record why.
        let deadline = self.deadline.min(Instant::now() + CAUSE_GRACE);
        while state.peers.get(to).is_some_and(|peer| peer.gone.is_none()) {
            let (guard, in_time) = self.shared.wait_until(state, deadline);
            state = guard;
            if !in_time {
                break;
            }
        }
        Err(self.peer_gone(&state, to))
    }

    /// Waits for one segment.
    pub fn receive(&self, from: usize, step: u32, index: u32) -> Result<Arrived> {
        let mut arrived = self.receive_all(&[(from, step, index)])?;
        arrived.pop().ok_or_else(|| self.error("no segment".into(), false))
    }

    /// Waits for every segment in `wanted` (sender, step, index), in that order.
    pub fn receive_all(&self, wanted: &[(usize, u32, u32)]) -> Result<Vec<Arrived>> {
        let tags: Vec<Tag> = wanted
            .iter()
            .map(|&(sender, step, index)| Tag { operation: self.operation, step, index, sender })
            .collect();
        let mut found: Vec<Option<Arrived>> = vec![None; tags.len()];
        let mut state = self.shared.lock();
        loop {
            if let Some((reason, retryable)) = &state.aborted {
                return Err(self.aborted(reason, *retryable));
            }
            for (slot, tag) in found.iter_mut().zip(&tags) {
                if slot.is_none()
                    && let Some(arrived) = state.mailbox.take(tag)
                {
                    self.check_header(tag.sender, arrived.header)?;
                    *slot = Some(arrived);
                }
            }
            if found.iter().all(Option::is_some) {
                return Ok(found.into_iter().flatten().collect());
            }
            let mut missing: Vec<usize> =
                tags.iter().zip(&found).filter(|(_, f)| f.is_none()).map(|(t, _)| t.sender).collect();
            missing.dedup();
            for &sender in &missing {
                if let Some(header) = state.mailbox.header(self.operation, sender) {
                    self.check_header(sender, header)?;
                }
                if state.peers[sender].gone.is_some() {
                    return Err(self.peer_gone(&state, sender));
                }
            }
            // A lost peer breaks the group even when this wait does not involve it: some
            // other member's does, and the sooner everyone stops the clearer the logs.
            if let Some(lost) = (0..self.size()).find(|&p| matches!(state.peers[p].gone, Some(Gone::Lost(_)))) {
                return Err(self.peer_gone(&state, lost));
            }
            let (guard, in_time) = self.shared.wait_until(state, self.deadline);
            state = guard;
            if !in_time {
                missing.sort_unstable();
                missing.dedup();
                let names: Vec<String> = missing.iter().map(|&p| self.members.describe(p)).collect();
                return Err(self.error(
                    format!(
                        "{} did not arrive within {:?} (operation {} on {})",
                        names.join(", "),
                        self.timeout,
                        self.operation,
                        self.members.describe(self.members.me)
                    ),
                    true,
                ));
            }
        }
    }

    /// Fails at once if the operation cannot complete: the group was aborted, a peer's
    /// connection broke or it left, or a peer sent segments for this operation that show it
    /// runs another collective. For waits that do not go through the mailbox (shared memory).
    pub fn check_peers(&self) -> Result<()> {
        let state = self.shared.lock();
        if let Some((reason, retryable)) = &state.aborted {
            return Err(self.aborted(reason, *retryable));
        }
        for peer in self.members.peers() {
            if let Some(header) = state.mailbox.header(self.operation, peer) {
                self.check_header(peer, header)?;
            }
            if state.peers[peer].gone.is_some() {
                return Err(self.peer_gone(&state, peer));
            }
        }
        Ok(())
    }

    /// The error for a peer that can no longer send or receive.
    fn peer_gone(&self, state: &State, peer: usize) -> RuntimeError {
        let name = self.members.describe(peer);
        match state.peers.get(peer).and_then(|p| p.gone.as_ref()) {
            Some(Gone::Lost(reason)) => self.error(reason.clone(), true),
            Some(Gone::Left) => self.error(
                format!(
                    "{name} left the group (it closed its connection) before taking part in operation {}",
                    self.operation
                ),
                false,
            ),
            None => self.error(format!("the connection to {name} is closed"), true),
        }
    }

    /// Refuses a segment from a peer that runs another collective or another size.
    fn check_header(&self, sender: usize, header: Header) -> Result<()> {
        let (peer, me) = (self.members.describe(sender), self.members.describe(self.members.me));
        if header.kind != self.kind {
            return Err(self.error(
                format!(
                    "{peer} runs {} as operation {}, {me} runs {}: every task must call the same collectives in the same order",
                    header.kind.describe(),
                    self.operation,
                    self.kind.describe()
                ),
                false,
            ));
        }
        if self.same_len && header.tensor_len != self.tensor_len {
            return Err(self.error(
                format!(
                    "{peer} passes {} elements to operation {}, {me} passes {}: every task must pass tensors of the same size",
                    header.tensor_len, self.operation, self.tensor_len
                ),
                false,
            ));
        }
        Ok(())
    }

    /// Checks that a segment has the length both sides computed for it.
    pub fn expect_bytes(&self, from: usize, arrived: &Arrived, bytes: usize) -> Result<()> {
        if arrived.payload.len() == bytes {
            return Ok(());
        }
        Err(self.error(
            format!(
                "{} sent a segment of {} bytes for operation {} where {bytes} were due",
                self.members.describe(from),
                arrived.payload.len(),
                self.operation
            ),
            false,
        ))
    }
}
