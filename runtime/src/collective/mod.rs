//! Collectives: how replicas combine values.
//!
//! One trait for every transport. Replicas that are threads of one process use
//! [`InProcessGroup`]; the multi-worker strategy puts a network implementation behind the
//! same trait. Every operation has a deadline: a replica that never arrives produces an
//! error naming it instead of a hang, and a replica that fails aborts the group so the
//! others fail at once.

mod in_process;
mod rendezvous;

pub(crate) use in_process::chunk;
pub use in_process::{CrossDeviceOps, InProcessGroup};

use crate::Result;
use engine_graph::ops::ReduceOp;

pub trait Collective: Send + Sync {
    /// This participant's index in the group.
    fn rank(&self) -> usize;
    /// How many participants the group has.
    fn size(&self) -> usize;
    /// A name for errors (`replica 1`, `worker:1 at 127.0.0.1:2222`).
    fn describe(&self, rank: usize) -> String {
        format!("replica {rank}")
    }
    /// Combines `data` with every participant's and writes the result back.
    fn all_reduce(&self, data: &mut [f32], op: ReduceOp) -> Result<()>;
    /// The same in f64, for graphs run in double precision (equivalence and gradient
    /// checks). Transports that only carry f32 refuse.
    fn all_reduce_f64(&self, data: &mut [f64], op: ReduceOp) -> Result<()> {
        let _ = (data, op);
        Err(crate::RuntimeError::Collective {
            op: "all_reduce".into(),
            reason: "this transport carries f32 only".into(),
            retryable: false,
        })
    }
    /// Overwrites `data` with `root`'s.
    fn broadcast(&self, data: &mut [f32], root: usize) -> Result<()>;
    /// Every participant's `data`, concatenated in rank order.
    fn all_gather(&self, data: &[f32]) -> Result<Vec<f32>>;
    /// Returns when every participant has called it.
    fn barrier(&self) -> Result<()>;
    /// Marks the group failed: every pending and future call returns an error, retryable
    /// when the failure behind the abort is (a lost peer), so that every member reports the
    /// same kind of failure.
    fn abort(&self, reason: &str, retryable: bool);
    /// Tasks that asked to join this group's job (an elastic job's new or restarted
    /// workers), which the next re-formation takes in; none for fixed groups.
    fn pending_joiners(&self) -> usize {
        0
    }
}

/// An element type collectives sum: f32 (training) or f64 (equivalence checks).
///
/// Every transport sums in f64 and narrows once, in the same order (see
/// `transport/all_reduce.rs`), so that in-process replicas, shared memory and the network
/// give the same bits.
pub(crate) trait Summand: Copy + Send + Sync + 'static {
    fn widen(self) -> f64;
    fn narrow(wide: f64) -> Self;
}

impl Summand for f32 {
    fn widen(self) -> f64 {
        self as f64
    }
    fn narrow(wide: f64) -> Self {
        wide as f32
    }
}

impl Summand for f64 {
    fn widen(self) -> f64 {
        self
    }
    fn narrow(wide: f64) -> Self {
        wide
    }
}

/// Turns a sum into what `op` asks for.
pub(crate) fn finish<T: Copy + std::ops::DivAssign + From<u16>>(data: &mut [T], op: ReduceOp, size: usize) {
    if op == ReduceOp::Mean && size > 1 {
        let n = T::from(size as u16);
        data.iter_mut().for_each(|d| *d /= n);
    }
}
