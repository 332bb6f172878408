//! Iterating a dataset, and saving where the iteration is.
//!
//! The iterator owns one index stream that advances exactly one batch per batch handed
//! out, so `state()` is always the position of the last batch the caller received. With
//! prefetching, a second copy of the stream runs ahead on the dispatcher thread; the
//! consumer's copy replays it (with the dispatcher's filter decisions, so nothing is decoded
//! twice) and checks that both produced the same indices.

use super::dataset::Plan;
use super::error::{InputError, Result};
use super::example::Batch;
use super::materialize::EvalOracle;
use super::prefetch::{Prefetcher, Produced, Stride};
use super::state::{IdBatch, IteratorState};
use super::stream::{ReplayOracle, Stream};
use std::time::{Duration, Instant};

enum Mode {
    /// Decoding on the caller's thread.
    Inline(EvalOracle),
    Prefetch(Prefetcher, ReplayOracle),
}

/// Counters for the training loop's input report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IterStats {
    pub batches: u64,
    /// Total time callers spent inside `next` (waiting for a batch, or decoding it inline).
    pub blocked: Duration,
}

pub struct DatasetIter {
    plan: Plan,
    stream: Box<dyn Stream<IdBatch>>,
    mode: Mode,
    batches: u64,
    finished: bool,
    blocked_total: Duration,
    blocked_since_take: Duration,
    /// `(every, offset)`: of each group of `every` batches, only the one at `offset` is
    /// handed out (see [`DatasetIter::strided`]).
    stride: (usize, usize),
    /// The same, shared with the prefetching threads so that they decode only those.
    kept: Stride,
}

/// Whether this process may run on one CPU only (its affinity mask, or a cgroup quota).
/// Background decoding threads then only take turns with training on that CPU: every batch
/// costs thread switches and the decoder's pass through the caches, and nothing runs in
/// parallel. Decoding inline instead took the MLP's input time at one pinned CPU from
/// 0.052–0.069 to 0.041–0.047 ms per step. The batches are the same either way: a batch is
/// a pure function of its indices.
fn one_cpu() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() == 1)
}

impl DatasetIter {
    pub(crate) fn start(plan: Plan, stream: Box<dyn Stream<IdBatch>>, batches: u64) -> Result<Self> {
        let kept = Stride::default();
        kept.set(1, 0);
        let mode = if plan.prefetch == 0 && plan.threads <= 1 || one_cpu() {
            Mode::Inline(EvalOracle::new(plan.materializer.clone(), false))
        } else {
            let mut lead = plan.build_stream()?;
            let mut saved = Vec::new();
            stream.save(&mut saved);
            lead.load(&mut saved.iter())?;
            let depth = plan.prefetch.max(plan.threads);
            Mode::Prefetch(
                Prefetcher::start(lead, batches, plan.materializer.clone(), plan.threads, depth, kept.clone())?,
                ReplayOracle::default(),
            )
        };
        Ok(DatasetIter {
            plan,
            stream,
            mode,
            batches,
            finished: false,
            blocked_total: Duration::ZERO,
            blocked_since_take: Duration::ZERO,
            stride: (1, 0),
            kept,
        })
    }

    /// Hands out batch `offset` of every group of `every` consecutive batches: replica
    /// `offset` of `every` reading the one pipeline of the whole job, as replica `i` of a
    /// mirrored step takes the pipeline's batches `i, i + n, ...`. A group the input cannot
    /// fill ends the iteration, so every replica stops at the same step. Start it at a
    /// multiple of `every` batches ([`Dataset::iter_after`]).
    ///
    /// Only this iterator's batches are decoded; the others' indices are run through (and
    /// their filters decided) without decoding. A prefetching iterator may have decoded a
    /// few batches ahead before this call.
    ///
    /// [`Dataset::iter_after`]: super::Dataset::iter_after
    pub fn strided(mut self, every: usize, offset: usize) -> Self {
        self.stride = (every.max(1), offset.min(every.max(1) - 1));
        self.kept.set(self.stride.0, self.stride.1);
        self
    }

    /// The position after the last batch handed out; `Dataset::iter_from` continues there.
    /// After an error, the position is past the batch that failed.
    pub fn state(&self) -> IteratorState {
        let mut stages = Vec::new();
        self.stream.save(&mut stages);
        IteratorState {
            fingerprint: self.plan.fingerprint.clone(),
            num_shards: self.plan.sharding.num,
            shard_index: self.plan.sharding.index,
            batches: self.batches,
            stages,
        }
    }

    /// Which example of `ids` (a batch this iterator handed out) holds a NaN or an
    /// infinity, and where it comes from: `feature `c` is NaN (value 1 of 1) in
    /// data/train.csv:18`. `None` when every value of those examples is finite.
    pub fn find_non_finite(&self, ids: &[u64]) -> Result<Option<String>> {
        self.non_finite_finder().find(ids)
    }

    /// Where example `id` (an index in this dataset's source) comes from: `data/train.csv:18`,
    /// or the example's number in its IDX file.
    pub fn locate(&self, id: u64) -> String {
        self.plan.materializer.source.locate(id)
    }

    /// A handle that answers `find_non_finite` while the iterator is borrowed elsewhere
    /// (evaluation consumes it as an iterator of batches).
    pub fn non_finite_finder(&self) -> NonFiniteFinder {
        NonFiniteFinder(self.plan.materializer.clone())
    }

    pub fn stats(&self) -> IterStats {
        IterStats { batches: self.batches, blocked: self.blocked_total }
    }

    /// Time spent blocked in `next` since the previous call (what a step counter reports as
    /// input wait).
    pub fn take_time_blocked(&mut self) -> Duration {
        std::mem::take(&mut self.blocked_since_take)
    }

    /// The next batch: `Some(None)` for one that is not kept (another replica's share),
    /// whose indices advance the stream but whose examples are not decoded.
    fn produce(&mut self) -> Result<Option<Option<Batch>>> {
        let keep = self.kept.keeps(self.batches);
        match &mut self.mode {
            Mode::Inline(oracle) => match self.stream.next(oracle)? {
                Some(ids) if keep => self.plan.materializer.batch(&ids, self.batches).map(|b| Some(Some(b))),
                Some(_) => Ok(Some(None)),
                None => Ok(None),
            },
            Mode::Prefetch(prefetcher, replay) => {
                let (ids, batch) = match prefetcher.recv() {
                    Produced::Batch { ids, batch, decisions } => {
                        replay.decisions.extend(decisions);
                        (ids, Some(batch))
                    }
                    Produced::Skipped { ids, decisions } => {
                        replay.decisions.extend(decisions);
                        (ids, None)
                    }
                    Produced::End => return Ok(None),
                    Produced::Failed(e) => return Err(e),
                };
                match self.stream.next(replay)? {
                    Some(own) if own == ids => {}
                    other => {
                        return Err(InputError::Thread(format!(
                            "the prefetching stream diverged: it produced {ids:?}, the iterator expected {other:?}"
                        )));
                    }
                }
                match (keep, batch) {
                    (false, _) => Ok(Some(None)),
                    (true, Some(batch)) => batch.map(|b| Some(Some(b))),
                    (true, None) => Err(InputError::Thread(format!(
                        "batch {} was kept but the prefetching threads skipped it",
                        self.batches
                    ))),
                }
            }
        }
    }
}

impl Iterator for DatasetIter {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        let (every, _) = self.stride;
        let mut mine = None;
        for _ in 0..every {
            match self.next_batch()? {
                Ok(Some(batch)) => mine = Some(batch),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        mine.map(Ok)
    }
}

impl DatasetIter {
    /// The pipeline's next batch (`None` inside for one that is not kept).
    fn next_batch(&mut self) -> Option<Result<Option<Batch>>> {
        if self.finished {
            return None;
        }
        let started = Instant::now();
        let result = self.produce();
        let waited = started.elapsed();
        self.blocked_total += waited;
        self.blocked_since_take += waited;
        match result {
            Ok(Some(batch)) => {
                self.batches += 1;
                Some(Ok(batch))
            }
            Ok(None) => {
                self.finished = true;
                None
            }
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}

// The training loop may run the iterator on its own thread, and share datasets.
const _: fn() = || {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<DatasetIter>();
    send_sync::<super::dataset::Dataset>();
};

/// Finds the example of a batch that holds a NaN or an infinity, and where it comes from.
#[derive(Clone)]
pub struct NonFiniteFinder(std::sync::Arc<super::materialize::Materializer>);

impl NonFiniteFinder {
    /// See [`DatasetIter::find_non_finite`].
    pub fn find(&self, ids: &[u64]) -> Result<Option<String>> {
        let materializer = &self.0;
        for &id in ids {
            if let Some((column, at, value)) = materializer.first_non_finite(id)? {
                let size = materializer.schema.columns().find(|c| c.name == column).map(|c| c.size()).unwrap_or(1);
                let what = if materializer.schema.label.as_ref().is_some_and(|l| l.name == column) {
                    "label"
                } else {
                    "feature"
                };
                return Ok(Some(format!(
                    "{what} `{column}` is {value} (value {} of {size}) in {}",
                    at + 1,
                    materializer.source.locate(id)
                )));
            }
        }
        Ok(None)
    }
}
