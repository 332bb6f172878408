//! The executors of one compiled graph in this process: one per local replica, plus a host
//! partition when the strategy places variables there. They run concurrently, each replica
//! on its own thread pool, joined by the strategy's collectives.

mod launch;

use super::remote::Remote;
use crate::{
    EstimatorError, Result,
    input::Batch,
    session::compile::{Compiled, LABELS},
    strategy::{Partitions, Strategy},
};
use engine_graph::{HostData, HostTensor, Outlet, Placement, ops::ReduceOp};
use engine_runtime::{
    Device, Exchange, Executor, Precision, RunOptions, RuntimeError, StepOutput, StepThreads, Value, VariableStore,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

struct Worker {
    exec: Executor,
    store: VariableStore,
    pool: Option<rayon::ThreadPool>,
    /// `Some(i)` for replica `i`; `None` for the host partition.
    replica: Option<usize>,
}

pub(crate) struct Replicas {
    workers: Vec<Worker>,
    replicas: usize,
    exchange: Option<Arc<Exchange>>,
    collectives: Vec<Arc<dyn engine_runtime::Collective>>,
    /// The ps tasks, when they hold the variables (parameter_server).
    remote: Option<Remote>,
    /// The compute pool a single CPU replica's steps run inside (and, with
    /// `ENGINE_STEP_THREADS=timed`, which of its halves, timed).
    step_threads: Option<StepThreads>,
}

impl Replicas {
    pub fn new(compiled: &Compiled, strategy: &dyn Strategy, precision: Precision) -> Result<Self> {
        let devices = strategy.local_devices();
        if devices.iter().any(|d| d.kind() == engine_runtime::DeviceKind::Cpu) {
            log_cpu();
        }
        let plan = &compiled.plan;
        let partitions = strategy.partitions(compiled.train_op.is_some());
        if partitions == Partitions::WorkerAndPs {
            return Self::remote(compiled, strategy, precision, devices);
        }
        let partitioned = partitions == Partitions::HostAndReplicas;
        let exchange = partitioned.then(|| Arc::new(Exchange::new(Duration::from_secs(300))));
        let has_collectives = plan.graph.nodes().any(|(_, n)| n.op.is_collective());
        let collectives = match (has_collectives, devices.len() > 1) {
            (true, _) | (false, true) => {
                strategy.collectives(devices.len(), &compiled.handshake_fingerprint)?.unwrap_or_default()
            }
            _ => Vec::new(),
        };
        let threads = strategy.threads_per_replica();
        let pool = |n: usize| -> Result<rayon::ThreadPool> {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| EstimatorError::Other(format!("cannot start a replica thread pool: {e}")))
        };
        let mut workers = Vec::new();
        for (i, d) in devices.iter().enumerate() {
            let mut exec = match &exchange {
                Some(x) => Executor::for_partition(plan.clone(), d.clone(), precision, Placement::Replica, x.clone())?,
                None => Executor::new(plan.clone(), d.clone(), precision)?,
            };
            if let Some(c) = collectives.get(i) {
                exec = exec.with_collective(c.clone());
            }
            let pool = match threads {
                Some(t) if devices.len() > 1 || partitioned => Some(pool(t)?),
                _ => None,
            };
            workers.push(Worker { exec, store: VariableStore::new(), pool, replica: Some(i) });
        }
        if let Some(x) = &exchange {
            let exec = Executor::for_partition(plan.clone(), Device::cpu(), precision, Placement::Host, x.clone())?;
            workers.push(Worker { exec, store: VariableStore::new(), pool: Some(pool(1)?), replica: None });
        }
        let single_cpu = workers.len() == 1 && devices.iter().all(|d| d.kind() == engine_runtime::DeviceKind::Cpu);
        let step_threads = single_cpu.then(|| StepThreads::new(compiled.purpose()));
        Ok(Replicas { workers, replicas: devices.len(), exchange, collectives, remote: None, step_threads })
    }

    /// A parameter-server training task: one replica, its partition of the plan, the
    /// variables on the ps tasks.
    fn remote(
        compiled: &Compiled,
        strategy: &dyn Strategy,
        precision: Precision,
        devices: Vec<Device>,
    ) -> Result<Self> {
        let [device] = &devices[..] else {
            return Err(EstimatorError::Config(format!(
                "a parameter-server task trains one replica, not {}",
                devices.len()
            )));
        };
        let clients = strategy.parameter_servers(&compiled.handshake_fingerprint)?.ok_or_else(|| {
            EstimatorError::Config(format!(
                "strategy '{}' placed variables on ps tasks it does not connect to",
                strategy.name()
            ))
        })?;
        let remote = Remote::new(&compiled.plan, clients, strategy.is_chief())?;
        let exec = Executor::for_partition(
            compiled.plan.clone(),
            device.clone(),
            precision,
            Placement::Worker,
            remote.exchange.clone(),
        )?;
        Ok(Replicas {
            workers: vec![Worker { exec, store: VariableStore::new(), pool: None, replica: Some(0) }],
            replicas: 1,
            exchange: None,
            collectives: Vec::new(),
            remote: Some(remote),
            step_threads: (device.kind() == engine_runtime::DeviceKind::Cpu)
                .then(|| StepThreads::new(compiled.purpose())),
        })
    }

    /// Whether parameter servers hold the variables (this process has a cached copy).
    pub fn on_parameter_servers(&self) -> bool {
        self.remote.is_some()
    }

    /// The global step the ps tasks hold, when they hold the variables.
    pub fn remote_global_step(&self) -> Option<u64> {
        self.remote.as_ref().and_then(|r| r.global_step)
    }

    /// Whether the ps tasks said training is over (the chief finished).
    pub fn finished(&self) -> bool {
        self.remote.as_ref().is_some_and(|r| r.finished)
    }

    /// Whether a ps task was asked to stop (preempted): the cluster stops and the chief
    /// saves a checkpoint.
    pub fn stopping(&self) -> bool {
        self.remote.as_ref().is_some_and(|r| r.stopping)
    }

    /// The group that joins this process's one replica with the other tasks' (multi_worker),
    /// for reductions outside the graph.
    pub fn cross_process_group(&self) -> Option<Arc<dyn engine_runtime::Collective>> {
        if self.replicas != 1 || self.remote.is_some() {
            return None;
        }
        self.collectives.first().cloned()
    }

    /// Whether any partition runs on a queued device (a GPU), whose reads back to the
    /// host the training loop counts.
    pub fn on_queued_device(&self) -> bool {
        self.workers.iter().any(|w| w.exec.device().is_queued())
    }

    /// Batch-consuming replicas.
    pub fn len(&self) -> usize {
        self.replicas
    }

    fn stateful(&mut self) -> impl Iterator<Item = &mut Worker> {
        self.workers.iter_mut().filter(|w| w.exec.has_variables())
    }

    /// Fresh variables from their initializers (identical on every replica: the seed and
    /// the variable name decide the values).
    pub fn initialize(&mut self, seed: u64) -> Result<()> {
        if let Some(r) = &mut self.remote {
            let e = &self.workers[0].exec;
            r.local.initialize(&e.plan().graph, seed, e.device().dispatch(), e.precision())?;
            return Ok(());
        }
        for w in self.stateful() {
            w.exec.initialize(&mut w.store, seed)?;
        }
        Ok(())
    }

    /// Loads checkpointed values into every copy of the variables; variables the checkpoint
    /// lacks are initialized. Returns the names loaded.
    pub fn restore(&mut self, values: &BTreeMap<String, HostTensor>, seed: u64) -> Result<Vec<String>> {
        if let Some(r) = &mut self.remote {
            let e = &self.workers[0].exec;
            let loaded = r.local.import(&e.plan().graph, values, e.device().dispatch(), e.precision())?;
            r.local.initialize(&e.plan().graph, seed, e.device().dispatch(), e.precision())?;
            return Ok(loaded);
        }
        let mut loaded = Vec::new();
        for w in self.stateful() {
            let e = &w.exec;
            loaded = w.store.import(&e.plan().graph, values, e.device().dispatch(), e.precision())?;
            e.initialize(&mut w.store, seed)?;
        }
        Ok(loaded)
    }

    /// Starts a cross-process group from one state: every task checks that all restored the
    /// same global step, then takes the chief's (rank 0's) variables, as PyTorch DDP and
    /// MultiWorkerMirroredStrategy broadcast the initial state. With a fixed seed the values
    /// already agree; without one, or when a task restored another checkpoint, this makes
    /// them agree or says which task differs.
    /// With ps tasks, the chief initializes them instead and the others wait for that.
    pub fn sync_from_chief(&mut self, step: u64, seed: u64) -> Result<()> {
        if let Some(r) = &mut self.remote {
            return r.start();
        }
        let Some(group) = self.collectives.first().cloned() else { return Ok(()) };
        // The step in 20-bit pieces, each exact in an f32.
        let pieces = [(step >> 40) as f32, ((step >> 20) & 0xF_FFFF) as f32, (step & 0xF_FFFF) as f32];
        let gathered = group.all_gather(&pieces)?;
        let steps: Vec<u64> =
            gathered.chunks(3).map(|c| ((c[0] as u64) << 40) | ((c[1] as u64) << 20) | c[2] as u64).collect();
        if let Some((rank, other)) = steps.iter().enumerate().find(|(_, s)| **s != step) {
            return Err(EstimatorError::Other(format!(
                "{} starts at global step {step} but {} starts at {other}: the tasks restored different checkpoints \
                 (is the model_dir shared by every task?)",
                group.describe(group.rank()),
                group.describe(rank)
            )));
        }
        self.take_state_of(0, seed)
    }

    /// The variables of the first copy as they are (device values at the job's precision):
    /// what an elastic job carries across a re-formation, exactly, f64 included.
    pub fn snapshot(&self) -> BTreeMap<String, Value> {
        self.workers.iter().find(|w| w.exec.has_variables()).map(|w| w.store.values()).unwrap_or_default()
    }

    /// Loads a snapshot into every copy of the variables (those of the graph, at their
    /// shapes); what it lacks is initialized.
    pub fn load_snapshot(&mut self, values: &BTreeMap<String, Value>, seed: u64) -> Result<()> {
        for w in self.stateful() {
            let graph = &w.exec.plan().graph;
            for id in graph.variables() {
                let node = graph.node(id);
                let engine_graph::Op::Variable(var) = &node.op else { continue };
                if let Some(value) = values.get(&node.name).filter(|v| v.shape() == var.shape) {
                    w.store.set(&node.name, value.clone());
                }
            }
            w.exec.initialize(&mut w.store, seed)?;
        }
        Ok(())
    }

    /// Every member of the cross-process group takes member `root`'s variables (optimizer
    /// slots and counters included), exactly: after an elastic job re-forms, the members
    /// continue from the one that completed the most steps. Floats travel as f64, which
    /// holds f32 and f64 variables alike without rounding.
    pub fn take_state_of(&mut self, root: usize, seed: u64) -> Result<()> {
        let Some(group) = self.collectives.first().cloned() else { return Ok(()) };
        let Some(first) = self.workers.iter().find(|w| w.exec.has_variables()) else { return Ok(()) };
        let (device, precision) = (first.exec.device().dispatch().clone(), first.exec.precision());
        let mine = self.snapshot();
        let mut taken = BTreeMap::new();
        // The same graph on every member: the names, in order, and shapes agree.
        for (name, value) in mine {
            let shape = value.shape();
            let value = match &value {
                Value::Float(_) => {
                    // A sum with zeros everywhere but the root is the root's value, bit for bit;
                    // the others need not read theirs back.
                    let mut data = match group.rank() == root {
                        true => value.to_f64_vec()?,
                        false => vec![0.0; shape.iter().product()],
                    };
                    group.all_reduce_f64(&mut data, ReduceOp::Sum)?;
                    Value::from_f64(&shape, data, &device, precision)
                }
                // The global step and other counters, exact in f64 below 2^53.
                Value::Int(_) => {
                    let host = value.to_host()?;
                    let HostData::I64(counts) = &host.data else { continue };
                    let mut wide: Vec<f64> =
                        counts.iter().map(|&x| if group.rank() == root { x as f64 } else { 0.0 }).collect();
                    group.all_reduce_f64(&mut wide, ReduceOp::Sum)?;
                    let counts = wide.iter().map(|&x| x as i64).collect();
                    Value::from_host(&HostTensor::new(shape, HostData::I64(counts))?, &device, precision)
                }
                Value::Bool(_) | Value::Unit => value,
            };
            taken.insert(name, value);
        }
        self.load_snapshot(&taken, seed)
    }

    /// Waits for every task of a cross-process group (at the end of training, so no task
    /// leaves while the chief still writes the final checkpoint).
    /// With ps tasks: tells them this task is done (they stop once every task is).
    pub fn barrier(&self) -> Result<()> {
        if let Some(r) = &self.remote {
            r.done();
            return Ok(());
        }
        match self.collectives.first() {
            Some(group) => Ok(group.barrier()?),
            None => Ok(()),
        }
    }

    /// The variables (the first copy: every copy holds the same values after a step).
    pub fn export(&self) -> Result<BTreeMap<String, HostTensor>> {
        if let Some(r) = &self.remote {
            return r.export(&self.workers[0].exec.plan().graph);
        }
        match self.workers.iter().find(|w| w.exec.has_variables()) {
            Some(w) => Ok(w.store.export()?),
            None => Ok(BTreeMap::new()),
        }
    }

    /// Runs one step: replica `i` gets `batches[i]`. Returns one output per replica, each
    /// with `fetches` in order (values the host partition computes are shared by all).
    pub fn run(&mut self, batches: Vec<Batch>, fetches: &[Outlet], options: RunOptions) -> Result<Vec<StepOutput>> {
        if batches.len() != self.replicas {
            return Err(EstimatorError::Other(format!("{} batches for {} replicas", batches.len(), self.replicas)));
        }
        self.run_feeds(batches.into_iter().map(feeds_of).collect(), fetches, options)
    }

    /// `run`, with each replica's batch as its placeholder feeds.
    pub fn run_feeds(
        &mut self,
        mut feeds: Vec<BTreeMap<String, HostTensor>>,
        fetches: &[Outlet],
        options: RunOptions,
    ) -> Result<Vec<StepOutput>> {
        if feeds.len() != self.replicas {
            return Err(EstimatorError::Other(format!("{} batches for {} replicas", feeds.len(), self.replicas)));
        }
        if self.remote.is_some() {
            return self.run_remote(feeds, fetches, options);
        }
        if let Some(x) = &self.exchange {
            x.clear();
        }
        feeds.resize_with(self.workers.len(), BTreeMap::new);
        let wanted: Vec<Vec<Outlet>> =
            self.workers.iter().map(|w| fetches.iter().copied().filter(|o| w.exec.owns(*o)).collect()).collect();
        let results: Vec<Result<StepOutput, RuntimeError>> = if self.workers.len() == 1 {
            let Worker { exec, store, .. } = &mut self.workers[0];
            let (feeds, wanted) = (&feeds[0], &wanted[0]);
            vec![on(&mut self.step_threads, || exec.run(store, feeds, wanted, RunOptions { replica: 0, ..options }))]
        } else {
            let exchange = self.exchange.clone();
            let collectives = self.collectives.clone();
            std::thread::scope(|s| {
                let handles: Vec<_> = self
                    .workers
                    .iter_mut()
                    .zip(&feeds)
                    .zip(&wanted)
                    .map(|((w, f), want)| {
                        let (exchange, collectives) = (exchange.clone(), collectives.clone());
                        s.spawn(move || {
                            let opts = RunOptions { replica: w.replica.unwrap_or(usize::MAX) as u64, ..options };
                            let Worker { exec, store, pool, .. } = w;
                            let out = match pool {
                                Some(p) => p.install(|| exec.run(store, f, want, opts)),
                                None => exec.run(store, f, want, opts),
                            };
                            if let Err(e) = &out {
                                // Release the others at once instead of at their timeout.
                                let why = e.to_string();
                                collectives.iter().for_each(|c| c.abort(&why, e.is_retryable()));
                                if let Some(x) = &exchange {
                                    x.abort(&why);
                                }
                            }
                            out
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(RuntimeError::Collective {
                                op: "step".into(),
                                reason: "a replica thread panicked".into(),
                                retryable: false,
                            })
                        })
                    })
                    .collect()
            })
        };
        // The root cause, not the errors of replicas that were aborted because of it.
        let mut outs = Vec::with_capacity(results.len());
        let mut first_err: Option<RuntimeError> = None;
        for r in results {
            match r {
                Ok(o) => outs.push(Some(o)),
                Err(e) => {
                    let aborted = matches!(&e, RuntimeError::Collective { retryable: false, reason, .. } if reason.contains("aborted"));
                    if first_err.is_none()
                        || (!aborted
                            && first_err.as_ref().is_some_and(|f| matches!(f, RuntimeError::Collective { .. })))
                    {
                        first_err = Some(e);
                    }
                    outs.push(None);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e.into());
        }
        // A step commits everywhere or nowhere: every copy of the variables checked the same
        // reduced values. Copies that disagree would train apart from here on.
        let committed: Vec<bool> = self
            .workers
            .iter()
            .zip(&outs)
            .filter(|(w, _)| w.exec.has_variables())
            .filter_map(|(_, o)| o.as_ref().map(|o| o.non_finite.is_empty()))
            .collect();
        if committed.iter().any(|c| *c) && committed.iter().any(|c| !*c) {
            return Err(EstimatorError::Other(
                "the replicas disagree on whether this step's values are finite, so their variables would differ"
                    .into(),
            ));
        }
        let non_finite =
            outs.iter().flatten().map(|o| &o.non_finite).find(|n| !n.is_empty()).cloned().unwrap_or_default();
        let host = self.workers.iter().position(|w| w.replica.is_none());
        let mut per_replica = Vec::with_capacity(self.replicas);
        for i in 0..self.replicas {
            let mut fetched = Vec::with_capacity(fetches.len());
            let mut timings = Vec::new();
            for o in fetches {
                let from = if self.workers[i].exec.owns(*o) {
                    Some(i)
                } else {
                    host.filter(|&h| self.workers[h].exec.owns(*o))
                };
                let Some(w) = from else {
                    return Err(EstimatorError::Other(format!("no partition computes fetch {o}")));
                };
                let out = outs[w].as_ref().ok_or_else(|| EstimatorError::Other("missing step output".into()))?;
                let pos = wanted[w].iter().position(|x| x == o).unwrap_or(0);
                fetched.push(out.fetched[pos].clone());
            }
            if let Some(o) = &outs[i] {
                timings = o.timings.clone();
            }
            let collectives = outs[i].as_ref().map(|o| o.collectives.clone()).unwrap_or_default();
            per_replica.push(StepOutput { fetched, timings, collectives, non_finite: non_finite.clone() });
        }
        Ok(per_replica)
    }
}

impl Replicas {
    /// One parameter-server step: pull the variables, compute, push what the ps tasks
    /// apply. A step whose gradients are not finite is not pushed.
    fn run_remote(
        &mut self,
        feeds: Vec<BTreeMap<String, HostTensor>>,
        fetches: &[Outlet],
        options: RunOptions,
    ) -> Result<Vec<StepOutput>> {
        let Some(remote) = self.remote.as_mut() else { return Err(EstimatorError::Other("no ps tasks".into())) };
        let [feeds] = <[_; 1]>::try_from(feeds)
            .map_err(|b| EstimatorError::Other(format!("{} batches for one parameter-server replica", b.len())))?;
        let w = &mut self.workers[0];
        // Variables on the ps tasks (the global step for the logs) are fetched as pulled at
        // the start of the step; values computed there cannot be.
        let g = &w.exec.plan().graph;
        let mut extra = Vec::new();
        for o in fetches.iter().filter(|o| !w.exec.owns(**o)) {
            let node = g.node(o.node);
            if !matches!(node.op, engine_graph::Op::Variable(_)) {
                return Err(EstimatorError::Other(format!(
                    "'{}' is computed on a ps task: a training task cannot fetch it",
                    node.name
                )));
            }
            extra.push((node.name.clone(), *o));
        }
        remote.pull(w.exec.device(), w.exec.precision(), &extra)?;
        let local: Vec<Outlet> = fetches.iter().copied().filter(|o| w.exec.owns(*o)).collect();
        let Worker { exec, store, .. } = w;
        let mut out = on(&mut self.step_threads, || exec.run(store, &feeds, &local, options))?;
        let w = &self.workers[0];
        let mut computed = std::mem::take(&mut out.fetched).into_iter();
        for o in fetches {
            let value = if w.exec.owns(*o) { computed.next() } else { remote.exchange.get(*o) };
            out.fetched.push(value.ok_or_else(|| EstimatorError::Other(format!("fetch {o} has no value")))?);
        }
        if !out.non_finite.is_empty() {
            return Ok(vec![out]);
        }
        let pushed = remote.push(options.step)?;
        if !pushed.non_finite.is_empty() {
            return Err(EstimatorError::NonFinite {
                step: remote.global_step.unwrap_or(0),
                value: pushed.non_finite.join("; "),
                cause: "a ps task refused the update (its gradients were finite, the new values were not): the model \
                        diverged (lower the learning rate, or clip gradients with clip_global_norm)"
                    .into(),
            });
        }
        Ok(vec![out])
    }
}

/// Runs a step in the compute pool `threads` chooses, or where it is called when there is
/// none (a device replica).
fn on<R: Send>(threads: &mut Option<StepThreads>, step: impl FnOnce() -> R + Send) -> R {
    match threads {
        Some(threads) => threads.run(step),
        None => step(),
    }
}

/// The placeholder feeds of a batch (moved, not copied).
pub(crate) fn feeds_of(batch: Batch) -> BTreeMap<String, HostTensor> {
    let mut feeds = batch.features;
    if let Some(l) = batch.labels {
        feeds.insert(LABELS.into(), l);
    }
    feeds
}

/// The CPU the native kernels were chosen for and the compute threads, once per process:
/// a figure from the log can then be told by its machine.
fn log_cpu() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let threads = engine_runtime::use_compute_threads();
        log::info!("CPU: {}; compute threads: {threads}", engine_runtime::HostCpu::get());
    });
}
