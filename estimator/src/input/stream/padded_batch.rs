//! Evaluation batching: exactly `batches` batches of `size` rows per pass, the rows past
//! the shard's end being padding (masked out by the `mask` feature). Every pipeline is
//! given the same `batches` (the largest shard's count), so all of them take the same number
//! of steps while every example is still evaluated exactly once.

use super::{FilterOracle, Stream, mismatch, next_state};
use crate::input::error::{InputError, Result};
use crate::input::state::{IdBatch, StageState};

pub(crate) struct PaddedBatchStream {
    upstream: Box<dyn Stream<u64>>,
    size: usize,
    batches: u64,
    emitted: u64,
}

impl PaddedBatchStream {
    pub fn new(upstream: Box<dyn Stream<u64>>, size: usize, batches: u64) -> Self {
        PaddedBatchStream { upstream, size, batches, emitted: 0 }
    }
}

impl Stream<IdBatch> for PaddedBatchStream {
    fn next(&mut self, oracle: &mut dyn FilterOracle) -> Result<Option<IdBatch>> {
        if self.emitted >= self.batches {
            if let Some(id) = self.upstream.next(oracle)? {
                return Err(InputError::Sharding(format!(
                    "example {id} is left over after {} padded batches of {}: the agreed batch count is too small",
                    self.batches, self.size
                )));
            }
            return Ok(None);
        }
        let mut ids = Vec::with_capacity(self.size);
        while ids.len() < self.size {
            match self.upstream.next(oracle)? {
                Some(id) => ids.push(id),
                None => break,
            }
        }
        self.emitted += 1;
        Ok(Some(IdBatch { ids, rows: self.size }))
    }

    fn reset(&mut self, epoch: u64) {
        self.emitted = 0;
        self.upstream.reset(epoch);
    }

    fn save(&self, out: &mut Vec<StageState>) {
        out.push(StageState::PaddedBatch { emitted: self.emitted });
        self.upstream.save(out);
    }

    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()> {
        match next_state(states, "padded batch")? {
            &StageState::PaddedBatch { emitted } => {
                self.emitted = emitted;
                self.upstream.load(states)
            }
            other => Err(mismatch("a padded batch", other)),
        }
    }
}
