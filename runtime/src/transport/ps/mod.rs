//! Parameter servers over gRPC (`proto/ps.proto`): a ps task serves its shard of the
//! variables ([`serve`]); training tasks pull variables and push gradients through
//! [`ParameterClients`].
//!
//! Training is asynchronous, as with TensorFlow's parameter servers: a ps task applies each
//! push as it arrives, one at a time, and every task reads whatever values are current.
//! Failures are named, never waited out: an unreachable ps task fails the call at once (or
//! at the call deadline), a ps task whose chief is gone refuses the workers with the
//! chief's name, and a ps task with nobody to serve gives up after the connect timeout.

mod client;
mod proto;
mod server;
mod shard;
mod tensor;

#[cfg(test)]
mod tests;

pub use client::{ClientConfig, ParameterClients, Pushed};
pub use server::{ServeConfig, serve};
pub use shard::{Applied, ParameterShard};

/// Bumped when a message's meaning changes.
const PROTOCOL_VERSION: u32 = 1;

/// Variables travel whole: a pull or an export carries whole tensors (the largest layer of
/// the models in `specs/` is a few MiB). Bounds what a peer can make this task buffer.
const MAX_MESSAGE_BYTES: usize = 1 << 30;
