//! The position of an iterator, small enough to store in every checkpoint.
//!
//! Because every stage works on source indices, a position is a handful of counters plus
//! the indices in shuffle buffers (not the examples): for Fashion-MNIST with a 10 000
//! shuffle buffer, about 60 KB of JSON. Restoring it, in this process or another, continues
//! with exactly the batches an unbroken run would have produced.

use super::error::{InputError, Result};
use serde::{Deserialize, Serialize};

/// The source indices of one batch; rows past `ids.len()` (up to `rows`) are padding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdBatch {
    pub ids: Vec<u64>,
    pub rows: usize,
}

/// A shuffle buffer's contents: source indices before `batch`, batches of them after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BufferState {
    Ids(Vec<u64>),
    Batches(Vec<IdBatch>),
}

/// One stage's position; opaque to users, listed from the last stage to the source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StageState {
    /// Position in the shard's reading order.
    Source {
        position: u64,
    },
    Filter,
    /// `epoch` selects the seed; `draws` is the random stream's position.
    Shuffle {
        epoch: u64,
        draws: u64,
        upstream_done: bool,
        buffer: BufferState,
    },
    /// Completed passes over the upstream, and the epoch number handed to it.
    Repeat {
        outer: u64,
        passes: u64,
        yielded_this_pass: bool,
        finished: bool,
    },
    Take {
        taken: u64,
    },
    Skip {
        skipped: bool,
    },
    Batch,
    PaddedBatch {
        emitted: u64,
    },
}

/// Where an iterator is: restored with `Dataset::iter_from`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IteratorState {
    /// Identifies the dataset (source, sharding, stages) so that a state is never applied
    /// to another pipeline.
    pub fingerprint: String,
    pub num_shards: usize,
    pub shard_index: usize,
    /// Batches handed out since the start.
    pub batches: u64,
    pub stages: Vec<StageState>,
}

impl IteratorState {
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| InputError::State(e.to_string()))
    }

    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| InputError::State(format!("unreadable iterator state: {e}")))
    }
}
