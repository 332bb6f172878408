//! Collectives between the processes of a multi-worker cluster, over gRPC.
//!
//! Each process (one per cluster task) holds one [`NetworkGroup`]: the network
//! implementation of [`Collective`](crate::Collective), the counterpart of
//! [`InProcessGroup`](crate::InProcessGroup) for replicas that are threads.
//!
//! How it works:
//!
//! - **Connecting.** [`NetworkGroup::connect`] binds the task's address from the cluster
//!   spec and serves `proto/collective.proto` on a tokio runtime of its own. It then
//!   reaches every other member (chief and workers; ps and evaluators never join),
//!   retrying while they start, and shakes hands: task identity, group size and the job
//!   fingerprint must match, or both sides fail with an error naming both tasks. A token,
//!   when configured, is required on every call.
//! - **Streams and mailbox.** After the handshake each member opens one long-lived stream
//!   to each other member. A collective cuts tensors into ~1 MiB segments tagged with the
//!   operation's sequence number, the algorithm's step, the segment's index and the
//!   sender's rank; the receiving server files them in a mailbox, where the synchronous
//!   collective code waits for exactly the tags it needs.
//! - **Algorithms.** All-reduce sends small tensors (< 64 KiB) directly to everyone, one
//!   hop, and runs large ones around a pipelined ring; both add in the in-process ring's
//!   order, so every member gets the same bits (`all_reduce.rs` says how).
//! - **Shared memory.** Members that share a host map one segment at connect and run
//!   all-reduce through it (`shared_memory/`), two copies per byte instead of a trip
//!   through the network stack; `communication` chooses (`Auto` tries it, `Ring` never,
//!   `SharedMemory` insists). gRPC carries everything else and still watches the peers.
//! - **Failures.** Every collective has a deadline and names the members whose data did not
//!   arrive; a peer whose connection breaks fails pending and later collectives at once; a
//!   peer that sends something malformed is treated as broken, never trusted. Any failure
//!   aborts the group and tells the peers, so that all members stop, with the first cause.
//!
//! ```no_run
//! use engine_runtime::cluster::{Cluster, ClusterSource, ClusterSpec, TaskId, TaskType};
//! use engine_runtime::transport::{Communication, NetworkConfig, NetworkGroup};
//! use engine_runtime::Collective;
//! use std::time::Duration;
//!
//! let spec = ClusterSpec { worker: vec!["127.0.0.1:2222".into(), "127.0.0.1:2223".into()], ..Default::default() };
//! let cluster = Cluster::new(spec, TaskId::new(TaskType::Worker, 0), ClusterSource::Flags, None)?;
//! let group = NetworkGroup::connect(NetworkConfig {
//!     cluster,
//!     fingerprint: "job-abc".into(),
//!     token: None,
//!     collective_timeout: Duration::from_secs(60),
//!     connect_timeout: Duration::from_secs(120),
//!     tls: None,
//!     communication: Communication::Auto,
//! })?;
//! let mut gradient = vec![1.0f32; 1024];
//! group.all_reduce(&mut gradient, engine_graph::ops::ReduceOp::Mean)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod all_gather;
mod all_reduce;
mod auth;
mod barrier;
mod broadcast;
mod communication;
mod config;
mod error;
mod group;
mod handshake;
mod link;
mod listen;
mod mailbox;
mod members;
mod membership;
mod operation;
mod proto;
pub mod ps;
mod rendezvous;
mod server;
mod shared_memory;
mod state;
mod tls;
mod wire;

#[cfg(test)]
mod tests;

pub use communication::Communication;
pub use config::NetworkConfig;
pub use error::ConnectError;
pub use group::NetworkGroup;
pub use membership::Membership;
pub use rendezvous::{ElasticConfig, RoundRules, find_running_job, join_running, rendezvous};
pub use tls::TlsConfig;
