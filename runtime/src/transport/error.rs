//! Why a task could not join its collective group.
//!
//! Failures of a collective once the group is up are [`RuntimeError::Collective`]; these
//! are the failures of [`NetworkGroup::connect`], each naming this task and, where there
//! is one, the peer at fault, because the reader usually has one log of many machines.
//!
//! [`RuntimeError::Collective`]: crate::RuntimeError::Collective
//! [`NetworkGroup::connect`]: super::NetworkGroup::connect

use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConnectError {
    /// ps and evaluator tasks hold no rank: they never join a collective.
    #[error("{task} is not in the collective group: only the chief and the workers take part in collectives")]
    NotAMember { task: String },

    #[error("{task} cannot listen on its address: {reason}")]
    Listen { task: String, reason: String },

    /// The token cannot be sent as gRPC metadata. The token itself is never printed.
    #[error("{task}: the token must be printable ASCII without line breaks")]
    InvalidToken { task: String },

    #[error("{task}: TLS: {reason}")]
    Tls { task: String, reason: String },

    #[error("{task}: starting the network runtime failed: {reason}")]
    Runtime { task: String, reason: String },

    /// A handshake failed in either direction: a different job, a different cluster, a
    /// wrong token. `reason` names both tasks and what differs.
    #[error("{task} and {peer} refuse each other: {reason}")]
    Refused { task: String, peer: String, reason: String },

    /// `missing` lists each task that did not connect, with its address and the last error
    /// seen while trying to reach it.
    #[error("{task} gave up after {timeout:?} waiting for {missing}")]
    Timeout { task: String, timeout: Duration, missing: String },

    /// A peer gave up connecting (its own deadline passed, it was refused by another
    /// member) and told this task why.
    #[error("{task}: the group was aborted while connecting: {reason}")]
    Aborted { task: String, reason: String },

    /// `communication: SharedMemory` was asked for and some member could not map the
    /// group's segment (it runs on another host, or without a shared `/dev/shm`).
    #[error("{task}: shared memory is not available to the whole group: {reason}")]
    SharedMemory { task: String, reason: String },

    /// An elastic job's rendezvous closed without enough members to go on, or could not be
    /// held: the job stops (with a checkpoint) rather than train below `min_workers`.
    #[error("{task}: the job cannot re-form its group: {reason}")]
    BelowMinimum { task: String, reason: String },

    /// A peer that had connected went away before the rest of the group was up.
    #[error("{task}: {peer} went away while the group was connecting: {reason}")]
    PeerLost { task: String, peer: String, reason: String },
}

impl ConnectError {
    /// Whether starting again could succeed without changing the configuration: a peer
    /// that was slow to start or restarted may be up next time; a mismatch will not go away.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ConnectError::Timeout { .. }
                | ConnectError::PeerLost { .. }
                | ConnectError::Aborted { .. }
                | ConnectError::Listen { .. }
        )
    }
}
