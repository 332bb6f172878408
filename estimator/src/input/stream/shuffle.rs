//! tf.data's shuffle buffer: fill a buffer of `size` elements, hand out a random one,
//! refill. With `reshuffle_each_iteration`, pass `e` uses a seed derived from (seed, e), so
//! every epoch has its own order and the whole sequence is fixed by the seed.

use super::{FilterOracle, Item, Stream, mismatch, next_state};
use crate::input::error::Result;
use crate::input::rng::{below, derive};
use crate::input::state::StageState;

pub(crate) struct ShuffleStream<T> {
    upstream: Box<dyn Stream<T>>,
    size: usize,
    seed: u64,
    reshuffle: bool,
    epoch: u64,
    draws: u64,
    buffer: Vec<T>,
    upstream_done: bool,
}

impl<T: Item> ShuffleStream<T> {
    pub fn new(upstream: Box<dyn Stream<T>>, size: usize, seed: u64, reshuffle: bool) -> Self {
        ShuffleStream {
            upstream,
            size: size.max(1),
            seed,
            reshuffle,
            epoch: 0,
            draws: 0,
            buffer: Vec::with_capacity(size.clamp(1, 1 << 20)),
            upstream_done: false,
        }
    }
}

impl<T: Item> Stream<T> for ShuffleStream<T> {
    fn next(&mut self, oracle: &mut dyn FilterOracle) -> Result<Option<T>> {
        while !self.upstream_done && self.buffer.len() < self.size {
            match self.upstream.next(oracle)? {
                Some(item) => self.buffer.push(item),
                None => self.upstream_done = true,
            }
        }
        if self.buffer.is_empty() {
            return Ok(None);
        }
        let seed = if self.reshuffle { derive(self.seed, self.epoch) } else { self.seed };
        let pick = below(seed, self.draws, self.buffer.len());
        self.draws += 1;
        Ok(Some(self.buffer.swap_remove(pick)))
    }

    fn reset(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.draws = 0;
        self.buffer.clear();
        self.upstream_done = false;
        self.upstream.reset(epoch);
    }

    fn save(&self, out: &mut Vec<StageState>) {
        out.push(StageState::Shuffle {
            epoch: self.epoch,
            draws: self.draws,
            upstream_done: self.upstream_done,
            buffer: T::save_buffer(&self.buffer),
        });
        self.upstream.save(out);
    }

    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()> {
        match next_state(states, "shuffle")? {
            StageState::Shuffle { epoch, draws, upstream_done, buffer } => {
                let buffer = T::load_buffer(buffer)?;
                if buffer.len() > self.size {
                    return Err(mismatch(&format!("a shuffle buffer of at most {}", self.size), &buffer.len()));
                }
                (self.epoch, self.draws, self.upstream_done, self.buffer) = (*epoch, *draws, *upstream_done, buffer);
                self.upstream.load(states)
            }
            other => Err(mismatch("a shuffle", other)),
        }
    }
}
