//! Server-side batching: requests that arrive within a short window run as one batch, as
//! TensorFlow Serving's batching does (`max_batch_size`, `batch_timeout_micros`). One
//! thread owns the model; the HTTP tasks hand it requests through a bounded queue and
//! await their rows of the result.

use engine_estimator::{EstimatorError, export::Predictor};
use engine_graph::HostTensor;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub type Outputs = BTreeMap<String, HostTensor>;

#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    /// Examples per run at most (a larger request runs alone).
    pub max_batch_size: usize,
    /// How long the first request of a batch waits for others.
    pub timeout: Duration,
    /// Requests waiting at most; beyond it the server answers 503 at once.
    pub queue: usize,
}

struct Job {
    inputs: BTreeMap<String, HostTensor>,
    rows: usize,
    reply: oneshot::Sender<Result<Outputs, EstimatorError>>,
}

/// Why a request got no result.
pub enum Refused {
    Busy,
    Stopped,
}

/// What the model thread has run: requests, examples and batches (runs).
#[derive(Debug, Default)]
pub struct Counts {
    pub requests: AtomicU64,
    pub examples: AtomicU64,
    pub batches: AtomicU64,
}

#[derive(Clone)]
pub struct Batcher {
    tx: SyncSender<Job>,
    pub counts: Arc<Counts>,
}

impl Batcher {
    /// Starts the model thread. It ends when every `Batcher` clone is dropped.
    pub fn start(predictor: Predictor, options: BatchOptions) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(options.queue.max(1));
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        std::thread::Builder::new().name("serve-model".into()).spawn(move || run(predictor, rx, options, &c))?;
        Ok(Batcher { tx, counts })
    }

    /// Queues a request and waits for its outputs.
    pub async fn predict(
        &self,
        inputs: BTreeMap<String, HostTensor>,
        rows: usize,
    ) -> Result<Result<Outputs, EstimatorError>, Refused> {
        let (reply, rx) = oneshot::channel();
        match self.tx.try_send(Job { inputs, rows, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(Refused::Busy),
            Err(TrySendError::Disconnected(_)) => return Err(Refused::Stopped),
        }
        rx.await.map_err(|_| Refused::Stopped)
    }
}

fn run(mut predictor: Predictor, rx: Receiver<Job>, options: BatchOptions, counts: &Counts) {
    let mut carried: Option<Job> = None;
    loop {
        let first = match carried.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
        };
        let mut rows = first.rows;
        let mut jobs = vec![first];
        let deadline = Instant::now() + options.timeout;
        while rows < options.max_batch_size {
            let next = match deadline.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => rx.recv_timeout(left),
                _ => rx.try_recv().map_err(|_| RecvTimeoutError::Timeout),
            };
            match next {
                Ok(j) if rows + j.rows > options.max_batch_size => {
                    carried = Some(j);
                    break;
                }
                Ok(j) => {
                    rows += j.rows;
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        counts.requests.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        counts.examples.fetch_add(rows as u64, Ordering::Relaxed);
        counts.batches.fetch_add(1, Ordering::Relaxed);
        execute(&mut predictor, jobs, options.max_batch_size);
    }
}

/// Runs one request in runs of at most `max` examples, so that a large request cannot
/// allocate activations for more than a batch at a time.
fn chunked(
    predictor: &mut Predictor,
    inputs: BTreeMap<String, HostTensor>,
    rows: usize,
    max: usize,
) -> Result<Outputs, EstimatorError> {
    if rows <= max {
        return predictor.predict(inputs);
    }
    let mut parts: Vec<Outputs> = Vec::new();
    for start in (0..rows).step_by(max.max(1)) {
        let n = max.min(rows - start);
        let chunk =
            inputs.iter().map(|(k, t)| Ok((k.clone(), t.rows(start, n)?))).collect::<Result<_, EstimatorError>>()?;
        parts.push(predictor.predict(chunk)?);
    }
    let mut out = Outputs::new();
    for key in parts[0].keys() {
        let pieces: Vec<&HostTensor> = parts.iter().filter_map(|p| p.get(key)).collect();
        out.insert(key.clone(), HostTensor::concat_rows(&pieces)?);
    }
    Ok(out)
}

/// Runs the jobs as one batch and gives each its rows.
fn execute(predictor: &mut Predictor, jobs: Vec<Job>, max: usize) {
    if jobs.len() == 1 {
        if let Some(Job { inputs, rows, reply }) = jobs.into_iter().next() {
            let _ = reply.send(chunked(predictor, inputs, rows, max));
        }
        return;
    }
    let merged = merge(&jobs).and_then(|inputs| predictor.predict(inputs));
    let mut start = 0;
    for job in jobs {
        let result = match &merged {
            Ok(outputs) => outputs
                .iter()
                .map(|(k, t)| Ok((k.clone(), t.rows(start, job.rows)?)))
                .collect::<Result<Outputs, EstimatorError>>(),
            Err(e) => Err(EstimatorError::Other(e.to_string())),
        };
        start += job.rows;
        let _ = job.reply.send(result);
    }
}

fn merge(jobs: &[Job]) -> Result<BTreeMap<String, HostTensor>, EstimatorError> {
    let mut out = BTreeMap::new();
    for name in jobs[0].inputs.keys() {
        let parts: Vec<&HostTensor> = jobs.iter().filter_map(|j| j.inputs.get(name)).collect();
        out.insert(name.clone(), HostTensor::concat_rows(&parts)?);
    }
    Ok(out)
}
