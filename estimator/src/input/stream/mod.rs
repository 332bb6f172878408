//! Index streams: which source examples come out, in which order, grouped how.
//!
//! Each stage (shuffle, repeat, take, skip, filter, batch) transforms a stream of source
//! indices (or of batches of them) without touching example values, except filters, which
//! ask a `FilterOracle`. Working on indices keeps every stage cheap to run twice (the
//! prefetching iterator keeps a second copy in step with what it has handed out), and keeps
//! every position small to save (`StageState`).
//!
//! Every stage is fused: once it returns `None` it keeps returning `None` until `reset`,
//! which starts a new pass (epoch) over the data, as re-creating a tf.data iterator does.

pub(crate) mod batch;
pub(crate) mod filter;
pub(crate) mod padded_batch;
pub(crate) mod repeat;
pub(crate) mod shuffle;
pub(crate) mod source;
pub(crate) mod take_skip;

use super::error::{InputError, Result};
use super::state::{BufferState, IdBatch, StageState};
use std::collections::VecDeque;

/// Answers "does filter `filter` keep example `id`?".
pub(crate) trait FilterOracle {
    fn keep(&mut self, filter: usize, id: u64) -> Result<bool>;
}

/// Replays decisions made (and logged) by another copy of the same stream.
#[derive(Default)]
pub(crate) struct ReplayOracle {
    pub decisions: VecDeque<bool>,
}

impl FilterOracle for ReplayOracle {
    fn keep(&mut self, _filter: usize, id: u64) -> Result<bool> {
        self.decisions
            .pop_front()
            .ok_or_else(|| InputError::Thread(format!("filter decision for example {id} missing from the producer")))
    }
}

pub(crate) trait Stream<T>: Send {
    fn next(&mut self, oracle: &mut dyn FilterOracle) -> Result<Option<T>>;

    /// Starts pass `epoch` over the data.
    fn reset(&mut self, epoch: u64);

    /// Appends this stage's state, then its upstream's.
    fn save(&self, out: &mut Vec<StageState>);

    /// Takes this stage's state, then hands the rest to its upstream.
    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()>;
}

/// What flows through a stream: a source index, or a batch of them.
pub(crate) trait Item: Clone + Send + 'static {
    fn save_buffer(buffer: &[Self]) -> BufferState;
    fn load_buffer(state: &BufferState) -> Result<Vec<Self>>;
}

impl Item for u64 {
    fn save_buffer(buffer: &[Self]) -> BufferState {
        BufferState::Ids(buffer.to_vec())
    }

    fn load_buffer(state: &BufferState) -> Result<Vec<Self>> {
        match state {
            BufferState::Ids(ids) => Ok(ids.clone()),
            BufferState::Batches(_) => Err(mismatch("a shuffle buffer of examples", &"one of batches")),
        }
    }
}

impl Item for IdBatch {
    fn save_buffer(buffer: &[Self]) -> BufferState {
        BufferState::Batches(buffer.to_vec())
    }

    fn load_buffer(state: &BufferState) -> Result<Vec<Self>> {
        match state {
            BufferState::Batches(b) => Ok(b.clone()),
            BufferState::Ids(_) => Err(mismatch("a shuffle buffer of batches", &"one of examples")),
        }
    }
}

pub(crate) fn mismatch(expected: &str, found: &dyn std::fmt::Debug) -> InputError {
    InputError::State(format!("expected {expected}, found {found:?}"))
}

/// The next saved state, or an error saying which stage ran out.
pub(crate) fn next_state<'a>(states: &mut std::slice::Iter<'a, StageState>, stage: &str) -> Result<&'a StageState> {
    states.next().ok_or_else(|| InputError::State(format!("no saved state for the {stage} stage")))
}
