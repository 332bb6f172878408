//! Passes over the upstream again and again (`count` times, or forever), starting each
//! pass with `reset(epoch)` so that shuffles below draw a new order. A pass that yields
//! nothing ends the repetition (an empty dataset repeated forever is empty, not a hang).

use super::{FilterOracle, Stream, mismatch, next_state};
use crate::input::error::Result;
use crate::input::rng::derive;
use crate::input::state::StageState;

pub(crate) struct RepeatStream<T> {
    upstream: Box<dyn Stream<T>>,
    count: Option<u64>,
    /// The epoch this stage itself was reset to (non-zero only when repeats nest).
    outer: u64,
    passes: u64,
    yielded_this_pass: bool,
    finished: bool,
}

impl<T: Send + 'static> RepeatStream<T> {
    pub fn new(upstream: Box<dyn Stream<T>>, count: Option<u64>) -> Self {
        RepeatStream { upstream, count, outer: 0, passes: 0, yielded_this_pass: false, finished: count == Some(0) }
    }

    fn epoch_of_pass(&self, pass: u64) -> u64 {
        if self.outer == 0 { pass } else { derive(self.outer, pass) }
    }
}

impl<T: Send + 'static> Stream<T> for RepeatStream<T> {
    fn next(&mut self, oracle: &mut dyn FilterOracle) -> Result<Option<T>> {
        while !self.finished {
            if let Some(item) = self.upstream.next(oracle)? {
                self.yielded_this_pass = true;
                return Ok(Some(item));
            }
            self.passes += 1;
            if !self.yielded_this_pass || self.count.is_some_and(|c| self.passes >= c) {
                self.finished = true;
            } else {
                self.yielded_this_pass = false;
                self.upstream.reset(self.epoch_of_pass(self.passes));
            }
        }
        Ok(None)
    }

    fn reset(&mut self, epoch: u64) {
        self.outer = epoch;
        self.passes = 0;
        self.yielded_this_pass = false;
        self.finished = self.count == Some(0);
        self.upstream.reset(self.epoch_of_pass(0));
    }

    fn save(&self, out: &mut Vec<StageState>) {
        out.push(StageState::Repeat {
            outer: self.outer,
            passes: self.passes,
            yielded_this_pass: self.yielded_this_pass,
            finished: self.finished,
        });
        self.upstream.save(out);
    }

    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()> {
        match next_state(states, "repeat")? {
            &StageState::Repeat { outer, passes, yielded_this_pass, finished } => {
                (self.outer, self.passes, self.yielded_this_pass, self.finished) =
                    (outer, passes, yielded_this_pass, finished);
                self.upstream.load(states)
            }
            other => Err(mismatch("a repeat", other)),
        }
    }
}
