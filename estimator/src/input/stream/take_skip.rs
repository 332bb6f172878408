//! The first `n` elements of each pass (`take`), or all but them (`skip`).

use super::{FilterOracle, Stream, mismatch, next_state};
use crate::input::error::Result;
use crate::input::state::StageState;

pub(crate) struct TakeStream<T> {
    upstream: Box<dyn Stream<T>>,
    n: u64,
    taken: u64,
}

impl<T: Send + 'static> TakeStream<T> {
    pub fn new(upstream: Box<dyn Stream<T>>, n: u64) -> Self {
        TakeStream { upstream, n, taken: 0 }
    }
}

impl<T: Send + 'static> Stream<T> for TakeStream<T> {
    fn next(&mut self, oracle: &mut dyn FilterOracle) -> Result<Option<T>> {
        if self.taken >= self.n {
            return Ok(None);
        }
        let item = self.upstream.next(oracle)?;
        if item.is_some() {
            self.taken += 1;
        } else {
            self.taken = self.n;
        }
        Ok(item)
    }

    fn reset(&mut self, epoch: u64) {
        self.taken = 0;
        self.upstream.reset(epoch);
    }

    fn save(&self, out: &mut Vec<StageState>) {
        out.push(StageState::Take { taken: self.taken });
        self.upstream.save(out);
    }

    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()> {
        match next_state(states, "take")? {
            &StageState::Take { taken } => {
                self.taken = taken;
                self.upstream.load(states)
            }
            other => Err(mismatch("a take", other)),
        }
    }
}

pub(crate) struct SkipStream<T> {
    upstream: Box<dyn Stream<T>>,
    n: u64,
    skipped: bool,
}

impl<T: Send + 'static> SkipStream<T> {
    pub fn new(upstream: Box<dyn Stream<T>>, n: u64) -> Self {
        SkipStream { upstream, n, skipped: false }
    }
}

impl<T: Send + 'static> Stream<T> for SkipStream<T> {
    fn next(&mut self, oracle: &mut dyn FilterOracle) -> Result<Option<T>> {
        if !self.skipped {
            for _ in 0..self.n {
                if self.upstream.next(oracle)?.is_none() {
                    break;
                }
            }
            self.skipped = true;
        }
        self.upstream.next(oracle)
    }

    fn reset(&mut self, epoch: u64) {
        self.skipped = false;
        self.upstream.reset(epoch);
    }

    fn save(&self, out: &mut Vec<StageState>) {
        out.push(StageState::Skip { skipped: self.skipped });
        self.upstream.save(out);
    }

    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()> {
        match next_state(states, "skip")? {
            &StageState::Skip { skipped } => {
                self.skipped = skipped;
                self.upstream.load(states)
            }
            other => Err(mismatch("a skip", other)),
        }
    }
}
