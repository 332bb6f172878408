//! Groups consecutive indices into batches; the last one of a pass is short, or dropped
//! with `drop_remainder`.

use super::{FilterOracle, Stream, mismatch, next_state};
use crate::input::error::Result;
use crate::input::state::{IdBatch, StageState};

pub(crate) struct BatchStream {
    upstream: Box<dyn Stream<u64>>,
    size: usize,
    drop_remainder: bool,
}

impl BatchStream {
    pub fn new(upstream: Box<dyn Stream<u64>>, size: usize, drop_remainder: bool) -> Self {
        BatchStream { upstream, size, drop_remainder }
    }
}

impl Stream<IdBatch> for BatchStream {
    fn next(&mut self, oracle: &mut dyn FilterOracle) -> Result<Option<IdBatch>> {
        let mut ids = Vec::with_capacity(self.size);
        while ids.len() < self.size {
            match self.upstream.next(oracle)? {
                Some(id) => ids.push(id),
                None => break,
            }
        }
        if ids.is_empty() || (ids.len() < self.size && self.drop_remainder) {
            return Ok(None);
        }
        let rows = ids.len();
        Ok(Some(IdBatch { ids, rows }))
    }

    fn reset(&mut self, epoch: u64) {
        self.upstream.reset(epoch);
    }

    fn save(&self, out: &mut Vec<StageState>) {
        out.push(StageState::Batch);
        self.upstream.save(out);
    }

    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()> {
        match next_state(states, "batch")? {
            StageState::Batch => self.upstream.load(states),
            other => Err(mismatch("a batch", other)),
        }
    }
}
