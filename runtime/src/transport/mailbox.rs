//! Where received segments wait for the collective that takes them.
//!
//! Frames arrive on the gRPC server's tasks whenever peers send them, possibly before this
//! process has started the operation they belong to (a peer that finished the previous
//! collective sooner sends the next one's data at once). Each segment is filed under its
//! tag until the synchronous collective code asks for exactly that tag. The mailbox is a
//! plain data structure; [`super::state`] puts it behind the lock and the condition
//! variable the waiters sleep on.
//!
//! Everything a peer sends is checked here, so that a confused or malicious peer produces
//! an error naming it, never a panic or an unbounded allocation of its choosing.

use super::proto::Segment;
use super::wire::{Kind, SEGMENT_BYTES};
use bytes::Bytes;
use std::collections::HashMap;

/// The tag of one segment: the same on the sender's and the receiver's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Tag {
    pub operation: u64,
    pub step: u32,
    pub index: u32,
    pub sender: usize,
}

/// What every segment of one operation from one sender must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub kind: Kind,
    pub tensor_len: u64,
}

/// A received segment.
#[derive(Debug, Clone)]
pub(super) struct Arrived {
    pub header: Header,
    pub payload: Bytes,
}

#[derive(Debug, Default)]
pub(super) struct Mailbox {
    segments: HashMap<Tag, Arrived>,
    /// The header of each (operation, sender) seen so far, so that a waiter learns that a
    /// peer runs a different collective as soon as any of its segments arrives, even one
    /// with a tag the waiter will never ask for.
    headers: HashMap<(u64, usize), Header>,
    /// Operations below this number are finished here: a segment for one of them can only
    /// be a peer's mistake.
    finished_below: u64,
}

impl Mailbox {
    /// Files a segment from `sender` (the rank its stream belongs to). An error describes
    /// what is wrong with it; the caller treats the peer as broken.
    pub fn deliver(&mut self, sender: usize, segment: Segment) -> Result<(), String> {
        if segment.sender as usize != sender {
            return Err(format!(
                "a segment claims to come from rank {} on the stream of rank {sender}",
                segment.sender
            ));
        }
        let kind = Kind::from_wire(segment.kind).ok_or_else(|| format!("unknown collective kind {}", segment.kind))?;
        if segment.payload.len() > SEGMENT_BYTES {
            return Err(format!("a segment of {} bytes exceeds the {SEGMENT_BYTES}-byte limit", segment.payload.len()));
        }
        if segment.operation < self.finished_below {
            return Err(format!(
                "a segment for operation {} arrived after this task finished it (it is at operation {})",
                segment.operation, self.finished_below
            ));
        }
        let header = Header { kind, tensor_len: segment.tensor_len };
        match self.headers.get(&(segment.operation, sender)) {
            Some(known) if *known != header => {
                return Err(format!(
                    "operation {} changed from {} of {} elements to {} of {} elements between segments",
                    segment.operation,
                    known.kind.describe(),
                    known.tensor_len,
                    kind.describe(),
                    segment.tensor_len
                ));
            }
            Some(_) => {}
            None => {
                self.headers.insert((segment.operation, sender), header);
            }
        }
        let tag = Tag { operation: segment.operation, step: segment.step, index: segment.index, sender };
        if self.segments.contains_key(&tag) {
            return Err(format!(
                "segment {} of step {} of operation {} arrived twice",
                tag.index, tag.step, tag.operation
            ));
        }
        self.segments.insert(tag, Arrived { header, payload: segment.payload });
        Ok(())
    }

    pub fn take(&mut self, tag: &Tag) -> Option<Arrived> {
        self.segments.remove(tag)
    }

    /// What `sender` said `operation` is, once any of its segments arrived.
    pub fn header(&self, operation: u64, sender: usize) -> Option<Header> {
        self.headers.get(&(operation, sender)).copied()
    }

    /// Forgets `operation`, returning the tags of its segments nobody took: after a
    /// successful operation there are none unless a peer ran it with other arguments (a
    /// broadcast from another root, say).
    pub fn finish(&mut self, operation: u64) -> Vec<Tag> {
        self.finished_below = self.finished_below.max(operation + 1);
        self.headers.retain(|(op, _), _| *op > operation);
        let mut left_over = Vec::new();
        self.segments.retain(|tag, _| {
            if tag.operation == operation {
                left_over.push(*tag);
            }
            tag.operation > operation
        });
        left_over.sort_by_key(|tag| (tag.sender, tag.step, tag.index));
        left_over
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(operation: u64, step: u32, sender: u32, len: usize) -> Segment {
        Segment {
            operation,
            kind: Kind::AllReduceF32 as u32,
            step,
            index: 0,
            sender,
            tensor_len: 4,
            payload: Bytes::from(vec![0u8; len]),
        }
    }

    #[test]
    fn segments_wait_under_their_tag_until_taken() {
        let mut mailbox = Mailbox::default();
        mailbox.deliver(1, segment(0, 2, 1, 16)).unwrap();
        let tag = Tag { operation: 0, step: 2, index: 0, sender: 1 };
        assert!(mailbox.take(&Tag { step: 1, ..tag }).is_none());
        assert_eq!(mailbox.take(&tag).map(|a| a.payload.len()), Some(16));
        assert!(mailbox.take(&tag).is_none());
        assert_eq!(mailbox.header(0, 1), Some(Header { kind: Kind::AllReduceF32, tensor_len: 4 }));
    }

    #[test]
    fn bad_segments_are_refused_with_a_reason() {
        let mut mailbox = Mailbox::default();
        assert!(mailbox.deliver(2, segment(0, 0, 1, 4)).unwrap_err().contains("claims to come from rank 1"));
        assert!(mailbox.deliver(1, segment(0, 0, 1, SEGMENT_BYTES + 1)).unwrap_err().contains("exceeds"));
        let mut unknown = segment(0, 0, 1, 4);
        unknown.kind = 77;
        assert!(mailbox.deliver(1, unknown).unwrap_err().contains("unknown collective kind 77"));
        mailbox.deliver(1, segment(0, 0, 1, 4)).unwrap();
        assert!(mailbox.deliver(1, segment(0, 0, 1, 4)).unwrap_err().contains("arrived twice"));
        let mut other = segment(0, 1, 1, 4);
        other.kind = Kind::Broadcast as u32;
        assert!(mailbox.deliver(1, other).unwrap_err().contains("changed from all_reduce (f32)"));
        assert_eq!(mailbox.finish(0), vec![Tag { operation: 0, step: 0, index: 0, sender: 1 }]);
        assert!(mailbox.deliver(1, segment(0, 5, 1, 4)).unwrap_err().contains("after this task finished it"));
        assert!(mailbox.header(0, 1).is_none());
    }
}
