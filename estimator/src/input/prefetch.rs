//! Background production of batches: one dispatcher thread runs the index stream (cheap)
//! and hands batches of indices round-robin to a bounded number of decoding threads, each
//! with a bounded output queue. The consumer reads the queues in the same round-robin order,
//! so batches come out in stream order whatever the thread timing, with no reordering
//! buffer. Dropping the consumer closes the queues, which stops every thread.

use super::error::{InputError, Result};
use super::example::Batch;
use super::materialize::{EvalOracle, Materializer};
use super::state::IdBatch;
use super::stream::Stream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// What the consumer receives, in stream order.
pub(crate) enum Produced {
    /// A batch (or its decoding error), its indices, and the filter decisions the
    /// dispatcher made to produce them (for the consumer's replaying stream).
    Batch {
        ids: IdBatch,
        batch: Result<Batch>,
        decisions: Vec<bool>,
    },
    /// A batch whose examples were not decoded: another replica's share (see `Stride`).
    Skipped {
        ids: IdBatch,
        decisions: Vec<bool>,
    },
    End,
    Failed(InputError),
}

/// Which batches the consumer keeps: `(every, offset)` packed in one word, so the decoding
/// threads skip the others' batches without decoding them. `(1, 0)` keeps every batch.
#[derive(Clone, Default)]
pub(crate) struct Stride(Arc<AtomicU64>);

impl Stride {
    pub fn set(&self, every: usize, offset: usize) {
        self.0.store(((every as u64) << 32) | offset as u64, Ordering::Relaxed);
    }

    /// Whether batch `number` of the pipeline is kept.
    pub fn keeps(&self, number: u64) -> bool {
        let packed = self.0.load(Ordering::Relaxed);
        let (every, offset) = (packed >> 32, packed & 0xFFFF_FFFF);
        every <= 1 || number % every == offset
    }
}

enum Job {
    Batch { ids: IdBatch, number: u64, decisions: Vec<bool> },
    End,
    Failed(InputError),
}

pub(crate) struct Prefetcher {
    outputs: Vec<Receiver<Produced>>,
    next: usize,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Prefetcher {
    /// `first` is the number of the first batch `lead` produces (the batches handed out
    /// before it, on a resumed iterator).
    pub fn start(
        mut lead: Box<dyn Stream<IdBatch>>,
        first: u64,
        materializer: Arc<Materializer>,
        workers: usize,
        depth: usize,
        stride: Stride,
    ) -> Result<Self> {
        let workers = workers.max(1);
        let per_worker = depth.div_ceil(workers).max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut inputs: Vec<SyncSender<Job>> = Vec::with_capacity(workers);
        let mut outputs = Vec::with_capacity(workers);
        let mut threads = Vec::with_capacity(workers + 1);
        let spawn_err = |e: std::io::Error| InputError::Thread(format!("cannot start a thread: {e}"));
        for k in 0..workers {
            let (job_tx, job_rx) = sync_channel::<Job>(1);
            let (out_tx, out_rx) = sync_channel::<Produced>(per_worker);
            let materializer = materializer.clone();
            let stride = stride.clone();
            let handle = std::thread::Builder::new()
                .name(format!("input-decode-{k}"))
                .spawn(move || {
                    while let Ok(job) = job_rx.recv() {
                        let produced = match job {
                            Job::Batch { ids, number, decisions } if !stride.keeps(number) => {
                                Produced::Skipped { ids, decisions }
                            }
                            Job::Batch { ids, number, decisions } => {
                                let batch = materializer.batch(&ids, number);
                                Produced::Batch { ids, batch, decisions }
                            }
                            Job::End => Produced::End,
                            Job::Failed(e) => Produced::Failed(e),
                        };
                        if out_tx.send(produced).is_err() {
                            break;
                        }
                    }
                })
                .map_err(spawn_err)?;
            inputs.push(job_tx);
            outputs.push(out_rx);
            threads.push(handle);
        }
        let stop_flag = stop.clone();
        let dispatcher = std::thread::Builder::new()
            .name("input-dispatch".into())
            .spawn(move || {
                let mut oracle = EvalOracle::new(materializer, true);
                let mut seq = 0usize;
                while !stop_flag.load(Ordering::Relaxed) {
                    let number = first + seq as u64;
                    let job = match lead.next(&mut oracle) {
                        Ok(Some(ids)) => Job::Batch { ids, number, decisions: std::mem::take(&mut oracle.log) },
                        Ok(None) => Job::End,
                        Err(e) => Job::Failed(e),
                    };
                    let last = !matches!(job, Job::Batch { .. });
                    if inputs[seq % inputs.len()].send(job).is_err() || last {
                        break;
                    }
                    seq += 1;
                }
            })
            .map_err(spawn_err)?;
        threads.push(dispatcher);
        Ok(Prefetcher { outputs, next: 0, stop, threads })
    }

    /// The next result in stream order (blocks until it is ready).
    pub fn recv(&mut self) -> Produced {
        let k = self.next % self.outputs.len();
        self.next += 1;
        match self.outputs[k].recv() {
            Ok(produced) => produced,
            Err(_) => Produced::Failed(InputError::Thread(format!("decoding thread {k} stopped unexpectedly"))),
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Closing the queues makes every blocked send fail, so each thread ends.
        self.outputs.clear();
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}
