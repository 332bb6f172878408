//! What travels in a segment: which collective it belongs to, how a tensor's elements are
//! written as bytes, and how a tensor is cut into segments.
//!
//! Sender and receiver compute the same cuts from the tensor's length alone, so a segment
//! needs no offset: its (step, index) tag says where it goes, and a payload of the wrong
//! length is a protocol error, not a buffer overrun.

use crate::collective::Summand;
use bytes::Bytes;
use std::ops::{AddAssign, Range};

/// The most bytes one segment carries. Big enough that per-message overhead vanishes
/// against the copy, small enough that the ring forwards a segment while the next one is
/// still arriving (pipelining) and that no message nears gRPC's size limits.
pub(super) const SEGMENT_BYTES: usize = 1 << 20;

/// Which collective a segment belongs to. Members that disagree (one calls `broadcast`
/// while another calls `all_reduce` as the same operation) fail with both names instead of
/// mixing each other's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    AllReduceF32 = 1,
    AllReduceF64 = 2,
    Broadcast = 3,
    AllGather = 4,
    Barrier = 5,
}

impl Kind {
    pub fn from_wire(code: u32) -> Option<Kind> {
        [Kind::AllReduceF32, Kind::AllReduceF64, Kind::Broadcast, Kind::AllGather, Kind::Barrier]
            .into_iter()
            .find(|kind| *kind as u32 == code)
    }

    /// The operation's name as the `Collective` trait spells it, for errors.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllReduceF32 | Kind::AllReduceF64 => "all_reduce",
            Kind::Broadcast => "broadcast",
            Kind::AllGather => "all_gather",
            Kind::Barrier => "barrier",
        }
    }

    /// A longer name for mismatch errors, where f32 against f64 must show.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::AllReduceF32 => "all_reduce (f32)",
            Kind::AllReduceF64 => "all_reduce_f64",
            other => other.name(),
        }
    }
}

/// An element type the collectives carry: f32 (training) or f64 (equivalence checks).
pub(super) trait Element:
    bytemuck::Pod + Default + AddAssign + std::ops::DivAssign + From<u16> + Summand
{
    const BYTES: usize;
    /// The all-reduce kind of this element type.
    const ALL_REDUCE: Kind;

    fn to_le(self, out: &mut Vec<u8>);
    fn from_le(bytes: &[u8]) -> Self;
}

impl Element for f32 {
    const BYTES: usize = 4;
    const ALL_REDUCE: Kind = Kind::AllReduceF32;

    fn to_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn from_le(bytes: &[u8]) -> Self {
        let mut raw = [0u8; 4];
        raw.copy_from_slice(bytes);
        f32::from_le_bytes(raw)
    }
}

impl Element for f64 {
    const BYTES: usize = 8;
    const ALL_REDUCE: Kind = Kind::AllReduceF64;

    fn to_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn from_le(bytes: &[u8]) -> Self {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(bytes);
        f64::from_le_bytes(raw)
    }
}

/// `values` as little-endian bytes, ready to send: one `memcpy` on little-endian machines
/// (all the ones we run on), where an element-by-element loop cost a sixth of the ring's
/// time.
pub(super) fn encode<E: Element>(values: &[E]) -> Bytes {
    if cfg!(target_endian = "little") {
        return Bytes::copy_from_slice(bytemuck::cast_slice(values));
    }
    let mut out = Vec::with_capacity(values.len() * E::BYTES);
    values.iter().for_each(|v| v.to_le(&mut out));
    Bytes::from(out)
}

/// Overwrites `out` with the values in `bytes`; the caller has checked the length.
pub(super) fn decode_into<E: Element>(bytes: &[u8], out: &mut [E]) {
    out.iter_mut().zip(bytes.chunks_exact(E::BYTES)).for_each(|(o, b)| *o = E::from_le(b));
}

/// Adds the values in `bytes` to `out` (`out[i] = out[i] + incoming[i]`, the order the
/// in-process ring uses); the caller has checked the length.
pub(super) fn accumulate_from<E: Element>(bytes: &[u8], out: &mut [E]) {
    out.iter_mut().zip(bytes.chunks_exact(E::BYTES)).for_each(|(o, b)| *o += E::from_le(b));
}

/// How many elements fit in one segment.
pub(super) fn elements_per_segment<E: Element>() -> usize {
    SEGMENT_BYTES / E::BYTES
}

/// `range` cut into pieces of at most `per_segment` elements. Never empty: an empty range
/// is one empty piece, so that a receiver always gets at least one segment (which carries
/// the sender's tensor length) and an all-gather of empty tensors still synchronizes.
pub(super) fn pieces(range: Range<usize>, per_segment: usize) -> Vec<Range<usize>> {
    let per_segment = per_segment.max(1);
    if range.is_empty() {
        return std::iter::once(range.start..range.start).collect();
    }
    (range.start..range.end).step_by(per_segment).map(|start| start..(start + per_segment).min(range.end)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_unknown_codes_are_refused() {
        for kind in [Kind::AllReduceF32, Kind::AllReduceF64, Kind::Broadcast, Kind::AllGather, Kind::Barrier] {
            assert_eq!(Kind::from_wire(kind as u32), Some(kind));
        }
        assert_eq!(Kind::from_wire(0), None);
        assert_eq!(Kind::from_wire(99), None);
    }

    #[test]
    fn values_survive_encoding_bit_for_bit() {
        let values = [0.1f32, -0.0, f32::MIN_POSITIVE / 2.0, f32::INFINITY, 1e30];
        let bytes = encode(&values);
        let mut back = [0f32; 5];
        decode_into(&bytes, &mut back);
        assert_eq!(values.map(f32::to_bits), back.map(f32::to_bits));
        let mut sum = [1.0f64, 2.0];
        accumulate_from(&encode(&[0.5f64, 0.25]), &mut sum);
        assert_eq!(sum, [1.5, 2.25]);
    }

    #[test]
    fn pieces_cover_the_range_and_are_never_empty() {
        assert_eq!(pieces(0..0, 4), vec![0..0]);
        assert_eq!(pieces(3..3, 4), vec![3..3]);
        assert_eq!(pieces(2..11, 4), vec![2..6, 6..10, 10..11]);
        assert_eq!(pieces(0..8, 4), vec![0..4, 4..8]);
    }
}
