//! Drops the indices a filter rejects.

use super::{FilterOracle, Stream, mismatch, next_state};
use crate::input::error::Result;
use crate::input::state::StageState;

pub(crate) struct FilterStream {
    upstream: Box<dyn Stream<u64>>,
    filter: usize,
}

impl FilterStream {
    pub fn new(upstream: Box<dyn Stream<u64>>, filter: usize) -> Self {
        FilterStream { upstream, filter }
    }
}

impl Stream<u64> for FilterStream {
    fn next(&mut self, oracle: &mut dyn FilterOracle) -> Result<Option<u64>> {
        while let Some(id) = self.upstream.next(oracle)? {
            if oracle.keep(self.filter, id)? {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    fn reset(&mut self, epoch: u64) {
        self.upstream.reset(epoch);
    }

    fn save(&self, out: &mut Vec<StageState>) {
        out.push(StageState::Filter);
        self.upstream.save(out);
    }

    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()> {
        match next_state(states, "filter")? {
            StageState::Filter => self.upstream.load(states),
            other => Err(mismatch("a filter", other)),
        }
    }
}
