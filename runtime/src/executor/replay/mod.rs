//! A steady-state step replayed as one captured device graph (issue 36, item 4).
//!
//! On a GPU the engine's step was bound by the host, not the device: about 50 µs of launch
//! work per graph op (burn's op, cubecl's launch path, its device thread) where the
//! kernels themselves took less. The plan knows the whole step, and from one step to the
//! next nothing changes but the feeds' contents and the variables' values, so the step is
//! recorded once (cubecl's graph capture: a CUDA graph on `cuda`, prebuilt dispatches on
//! `wgpu`) and replayed as one submission; what PyTorch users get from
//! `torch.cuda.graphs`, without writing the static buffers themselves.
//!
//! A recorded graph reads and writes the buffers it was recorded with, so:
//! - after `WATCH` alike steps (same fetches, feed shapes, replica and thread), the next
//!   one runs op by op after `graph_prepare`: the warmup that leaves the memory pools
//!   holding what the recording will ask for;
//! - the step after it is recorded: its feeds are uploaded first (nothing may be written
//!   inside the window), placeholders read those buffers and variables the store's, and
//!   the step's end (the numerics flag and the small fetches, `readback::prepare`) is
//!   gathered inside the graph. The recording runs nothing: its first replay is that step;
//! - every step then writes its feeds into the recorded buffers, replays, replays the
//!   commit graph right behind it, and reads the end in one transfer. The commit graph
//!   (recorded after the first commit ran for real) copies the step's new values into the
//!   variables' own buffers, each copy reading the step's numerics flag on the device and
//!   copying nothing unless it is finite (`device/guarded.rs`), so the host never stands
//!   between the step and its commit. The store keeps its buffers, so the next replay
//!   reads the new values, and a step that saw a NaN commits nothing, as an eager step.
//!   A step whose copies cannot be guarded (no numerics checks, a value the kernel does
//!   not take) commits from the host after the read, as before.
//!
//! Up to four graphs are held, one per key. A step run op by op while one is held (a
//! profiled step, a logging step with a key of its own) copies its new values into the
//! held buffers. A store whose buffers were replaced (a restore) drops the graphs that
//! read the old ones, and another thread's step (whose stream a graph is not ordered on)
//! is watched as a key of its own. A capture the backend refuses leaves the
//! executor eager, with a warning that says why. `ENGINE_STEP_GRAPH=off` keeps every step
//! eager.

mod launch;

pub use launch::{Finished, Launched, launched_steps};

use super::{Executor, StepOutput, Uploaded};
use crate::{Device, Result, RuntimeError, Value, VariableStore, readback, value::B};
use burn::backend::{Backend, DispatchGraph, TensorMetadata};
use engine_graph::{DType, HostTensor, NodeId, Op, Outlet, Plan};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::ThreadId;

/// Alike eager steps before the warmup: the first steps of a run differ (the input
/// pipeline's first batch, an evaluation right after), and a capture costs one step.
const WATCH: usize = 2;

/// Turns the replay off (`off`, `0`, `false`): every step runs op by op.
pub const STEP_GRAPH_ENV: &str = "ENGINE_STEP_GRAPH";

pub(super) struct Replay {
    /// Why this plan is never replayed; `None` when it may be.
    never: Option<String>,
    state: Mutex<State>,
    replayed: AtomicU64,
    /// Replayed steps whose commit was queued behind them, guarded on the device.
    queued: AtomicU64,
    /// The device whose stream a warmup prepares (`None` when nothing is replayed).
    device: Option<burn::backend::DispatchDevice>,
    /// Whether a step launched ahead was committed (the log says so once).
    launched_any: AtomicBool,
}

/// The graphs held, most recently replayed first, and the step being watched.
struct State {
    graphs: Vec<Captured>,
    watch: Watch,
    /// The backend failed (why): eager from now on.
    off: Option<String>,
    /// Steps whose recording was refused (a fetch too large to read back with the step, an
    /// op that reads the host), and why: they run op by op, the other keys still replay.
    refused: Vec<(Key, String)>,
}

enum Watch {
    Watching {
        key: Option<Key>,
        seen: usize,
    },
    /// `graph_prepare` was called and the warmup step ran with this key.
    Warm(Key),
}

/// At most this many graphs are held (a logging step fetches more than the others, and
/// gets a graph of its own); each holds its own intermediates' memory.
const MAX_GRAPHS: usize = 4;

/// What a step must share with the recorded one to replay it.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    fetches: Vec<Outlet>,
    feeds: Vec<(String, Vec<usize>, DType)>,
    replica: u64,
    thread: ThreadId,
}

impl Key {
    fn new(feeds: &BTreeMap<String, HostTensor>, fetches: &[Outlet], replica: u64) -> Self {
        Key {
            fetches: fetches.to_vec(),
            feeds: feeds.iter().map(|(n, t)| (n.clone(), t.shape.clone(), t.dtype())).collect(),
            replica,
            thread: std::thread::current().id(),
        }
    }
}

/// Why a capture gave no graph: the backend or the plan refused (the step then runs
/// eagerly), or the step itself failed before the window opened.
enum Refusal {
    Refused(String),
    Failed(RuntimeError),
}

impl Replay {
    /// Whether `plan`'s steps (the nodes `order` runs) may be replayed on `device`.
    pub(super) fn new(plan: &Plan, order: &[NodeId], device: &Device, partitioned: bool) -> Self {
        let never = never(plan, order, device, partitioned);
        Replay {
            device: never.is_none().then(|| device.dispatch().clone()),
            never,
            state: Mutex::new(State::new(None)),
            replayed: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            launched_any: AtomicBool::new(false),
        }
    }

    /// Never replays.
    pub(super) fn off() -> Self {
        let why = "turned off".to_string();
        Replay {
            never: Some(why.clone()),
            state: Mutex::new(State::new(Some(why))),
            replayed: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            device: None,
            launched_any: AtomicBool::new(false),
        }
    }

    /// Why steps are not replayed, once that is settled: the plan's reason or the
    /// backend's refusal.
    pub(super) fn refused(&self) -> Option<String> {
        let state = self.lock();
        self.never.clone().or_else(|| state.off.clone()).or_else(|| state.refused.last().map(|r| r.1.clone()))
    }

    pub(super) fn replayed(&self) -> u64 {
        self.replayed.load(Ordering::Relaxed)
    }

    pub(super) fn queued_commits(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a step run op by op must commit into the variables' buffers rather than
    /// replace them: a held graph reads those buffers, and replacing them would drop it.
    pub(super) fn holds(&self, vars: &VariableStore) -> bool {
        self.never.is_none() && self.lock().graphs.iter().any(|c| c.holds(vars))
    }

    /// Runs the step as a replay when it can be one; `None`: the caller runs it eagerly.
    pub(super) fn step(
        &self,
        exec: &Executor,
        vars: &mut VariableStore,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: super::RunOptions,
    ) -> Result<Option<StepOutput>> {
        if self.never.is_some() || options.profile {
            return Ok(None);
        }
        let key = Key::new(feeds, fetches, options.replica);
        let dev = exec.device.dispatch();
        let mut state = self.lock();
        if state.off.is_some() || state.refused.iter().any(|(k, _)| *k == key) {
            return Ok(None);
        }
        // A restore (or another store) replaced the variables: those graphs read stale
        // buffers.
        state.graphs.retain(|c| c.holds(vars));
        if let Some(at) = state.graphs.iter().position(|c| c.key == key) {
            state.end_warmup(dev);
            // A feed the eager step would refuse is refused the same way; the graph stays.
            exec.admit(feeds, fetches, options)?;
            state.graphs[at].write_inputs(exec, feeds, options.step)?;
            return self.replay(&mut state, at, exec).map(Some);
        }
        let watch = std::mem::replace(&mut state.watch, Watch::Watching { key: None, seen: 0 });
        state.watch = match watch {
            Watch::Warm(k) if k == key => {
                return match Captured::record(exec, vars, feeds, fetches, options, key.clone()) {
                    Ok(c) => {
                        log::info!(
                            "{}: the step is replayed as one captured graph of {} ops",
                            exec.device,
                            exec.steps.len()
                        );
                        // The recording ran nothing, and its feeds are in place: its first
                        // replay is this step.
                        state.graphs.insert(0, c);
                        state.graphs.truncate(MAX_GRAPHS);
                        self.replay(&mut state, 0, exec).map(Some)
                    }
                    Err(Refusal::Refused(why)) => {
                        log::warn!("{}: this step cannot be captured ({why}); it runs op by op", exec.device);
                        // A refusal before the window opened leaves the stream prepared.
                        let _ = B::graph_stop_capture(dev);
                        if state.refused.len() < 4 * MAX_GRAPHS {
                            state.refused.push((key, why));
                        }
                        Ok(None)
                    }
                    Err(Refusal::Failed(e)) => {
                        let _ = B::graph_stop_capture(dev);
                        Err(e)
                    }
                };
            }
            Watch::Warm(_) => {
                // Prepared for a capture that will not come: end it, so the stream's
                // allocations go back to the pools that reclaim memory.
                let _ = B::graph_stop_capture(dev);
                Watch::Watching { key: Some(key), seen: 1 }
            }
            Watch::Watching { key: Some(k), seen } if k == key => {
                if seen < WATCH {
                    Watch::Watching { key: Some(key), seen: seen + 1 }
                } else {
                    match B::graph_prepare(dev) {
                        Ok(()) => Watch::Warm(key),
                        Err(e) => {
                            let why = format!("{e:?}");
                            log::warn!("{}: no step graph ({why}); every step runs op by op", exec.device);
                            state.stop(why);
                            Watch::Watching { key: None, seen: 0 }
                        }
                    }
                }
            }
            _ => Watch::Watching { key: Some(key), seen: 1 },
        };
        Ok(None)
    }
}

impl Replay {
    /// Replays held graph `at` (its inputs written) as this step; the most recently
    /// replayed graph comes first. A failed replay ends replays for the executor.
    fn replay(&self, state: &mut State, at: usize, exec: &Executor) -> Result<StepOutput> {
        let out = state.graphs[at].run(exec);
        match &out {
            Ok((_, queued)) => self.count(state, at, *queued),
            Err(e) => state.stop(format!("a replay failed: {e}")),
        }
        out.map(|(step, _)| step)
    }

    /// Counts a replay of held graph `at` (`queued`: its commit queued behind it) and
    /// puts the graph first, as the most recently replayed.
    fn count(&self, state: &mut State, at: usize, queued: bool) {
        self.replayed.fetch_add(1, Ordering::Relaxed);
        self.queued.fetch_add(u64::from(queued), Ordering::Relaxed);
        state.graphs[..=at].rotate_right(1);
    }
}

/// An executor dropped during a warmup (its run ended right after one) leaves its thread's
/// stream prepared for a capture, and the next executor's warmup on that stream would be
/// refused: the warmup ends here, on the thread that began it.
impl Drop for Replay {
    fn drop(&mut self) {
        let (Some(dev), state) = (&self.device, self.state.get_mut().unwrap_or_else(|p| p.into_inner())) else {
            return;
        };
        if let Watch::Warm(key) = &state.watch {
            if key.thread == std::thread::current().id() {
                let _ = B::graph_stop_capture(dev);
            } else {
                log::warn!("{dev:?}: a step graph's warmup was left open on another thread's stream");
            }
        }
    }
}

impl State {
    fn new(off: Option<String>) -> Self {
        State { graphs: Vec::new(), watch: Watch::Watching { key: None, seen: 0 }, off, refused: Vec::new() }
    }

    /// Ends a warmup whose step did not come next, so the stream leaves its prepared mode.
    fn end_warmup(&mut self, dev: &burn::backend::DispatchDevice) {
        if matches!(self.watch, Watch::Warm(_)) {
            let _ = B::graph_stop_capture(dev);
            self.watch = Watch::Watching { key: None, seen: 0 };
        }
    }

    /// No more replays: the graphs go, and every step runs op by op.
    fn stop(&mut self, why: String) {
        self.graphs.clear();
        self.off = Some(why);
    }
}

/// Why a plan is never replayed, if it is not.
fn never(plan: &Plan, order: &[NodeId], device: &Device, partitioned: bool) -> Option<String> {
    if !device.is_queued() {
        return Some("the CPU runs each op as it comes".into());
    }
    if cfg!(feature = "fusion") {
        return Some("burn's fusion queues the launches itself (a build with `fusion`)".into());
    }
    if crate::switched_off(STEP_GRAPH_ENV) {
        return Some(format!("{STEP_GRAPH_ENV} is off"));
    }
    if partitioned {
        return Some("a partition exchanges values with others between its ops".into());
    }
    order.iter().map(|&id| plan.graph.node(id)).find_map(|node| {
        let why = match &node.op {
            op if op.is_collective() => "it waits for other replicas",
            // Indices are checked on the host, which reads them back.
            Op::Gather(_) | Op::ScatterAddRows(_) | Op::RowsTouched(_) => "it reads indices back to the host",
            Op::Transfer(_) => "it moves values between devices",
            _ => return None,
        };
        Some(format!("{} ({}): {why}", node.name, node.op.name()))
    })
}

/// How a replayed step commits its new values.
enum Commit {
    /// Not yet: the first commit runs the copies, then records them.
    Unrecorded,
    Graph(DispatchGraph),
    /// The copies could not be recorded: they are launched one by one.
    Copies,
}

/// A recorded step and the buffers it replays against.
struct Captured {
    key: Key,
    graph: DispatchGraph,
    commit: Commit,
    /// The feeds' and the dropout seeds' buffers.
    uploaded: Uploaded,
    /// The dropouts, whose seeds every replay writes for its step.
    dropouts: Vec<(NodeId, engine_graph::ops::Dropout)>,
    /// The variables the step reads, as the store holds them: their buffers are the step's
    /// state, which every commit writes.
    reads: BTreeMap<String, Value>,
    /// The values the step assigns, by variable.
    assignments: Vec<(String, Value)>,
    probes: Vec<(crate::value::T, usize, Value)>,
    end: readback::Prepared,
    /// Where a queued commit leaves a copy of the step's end, for a read after the next
    /// step was queued (`Replay::launch`).
    mailbox: Option<crate::value::T>,
    /// Whether the commit's copies read the step's numerics flag on the device, so that
    /// they are queued behind the step instead of waiting for the host to read the flag.
    guarded: bool,
}

impl Captured {
    /// Records the step (feeds uploaded before the window) without running it.
    fn record(
        exec: &Executor,
        vars: &VariableStore,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: super::RunOptions,
        key: Key,
    ) -> std::result::Result<Captured, Refusal> {
        let dev = exec.device.dispatch();
        let batch = exec.admit(feeds, fetches, options).map_err(Refusal::Failed)?;
        let g = &exec.plan.graph;
        let mut uploaded = Uploaded { feeds: BTreeMap::new(), seeds: BTreeMap::new() };
        let mut dropouts = Vec::new();
        let mut reads = BTreeMap::new();
        for step in &exec.steps {
            let node = g.node(step.node);
            match &node.op {
                Op::Placeholder(_) => {
                    let fed = feeds
                        .get(&node.name)
                        .ok_or_else(|| Refusal::Failed(RuntimeError::MissingFeed(node.name.clone())))?;
                    uploaded.feeds.insert(node.name.clone(), Value::from_host(fed, dev, exec.precision));
                }
                Op::Variable(_) => {
                    if let Some(v) = vars.get(&node.name) {
                        reads.insert(node.name.clone(), v.clone());
                    }
                }
                op => {
                    if let Some(d) = dropout_of(op) {
                        uploaded.seeds.insert(step.node, seed_tensor(d, options.step, dev));
                        dropouts.push((step.node, d.clone()));
                    }
                }
            }
        }
        B::graph_start_capture(dev).map_err(|e| Refusal::Refused(format!("{e:?}")))?;
        let t0 = std::time::Instant::now();
        let walked = exec.walk(vars, feeds, fetches, options, None, batch, Some(&uploaded), t0).map(|flight| {
            let fetched = exec.fetched(&flight, fetches);
            let probes = flight.probes.iter().map(|p| p.0.clone()).collect();
            let end = readback::prepare(probes, fetched, true, exec.precision);
            (flight, end)
        });
        // Closed whatever the walk did: a stream left recording records everything after.
        let graph = B::graph_stop_capture(dev);
        // An op that failed inside the window (a read the recording refused, or a real
        // error) runs again eagerly, where a real error is reported as always.
        let (flight, end) = walked.map_err(|e| Refusal::Refused(format!("the recorded step failed: {e}")))?;
        let graph = graph.map_err(|e| Refusal::Refused(format!("{e:?}")))?;
        if !end.reads_every_fetch() {
            return Err(Refusal::Refused("a fetched value is too large to read back with the step".into()));
        }
        if !flight.non_finite.is_empty() || !flight.collectives.is_empty() {
            return Err(Refusal::Refused("the step counted or exchanged values on the host".into()));
        }
        for (name, y) in &flight.assignments {
            let x = reads.get(name).and_then(Value::tensor);
            let y = y.tensor();
            let (Some(x), Some(y)) = (x, y) else {
                return Err(Refusal::Refused(format!("the step assigns {name} a value it cannot copy")));
            };
            if reads.values().filter_map(Value::tensor).any(|r| crate::device::cube::same_buffer(r, y)) {
                return Err(Refusal::Refused(format!("{name} is assigned a variable's own buffer")));
            }
            if x.shape() != y.shape() || x.dtype() != y.dtype() {
                return Err(Refusal::Refused(format!("{name} is assigned a value of another shape or type")));
            }
        }
        let guarded = end.flag().is_some_and(|flag| {
            flight
                .assignments
                .iter()
                .all(|(name, y)| reads.get(name).is_some_and(|x| crate::device::guarded::guardable(y, x, flag)))
        });
        Ok(Captured {
            key,
            graph,
            commit: Commit::Unrecorded,
            uploaded,
            dropouts,
            reads,
            assignments: flight.assignments,
            probes: flight.probes,
            mailbox: end.mailbox(),
            end,
            guarded,
        })
    }

    /// Whether the store still holds the buffers the graph reads.
    fn holds(&self, vars: &VariableStore) -> bool {
        self.reads.iter().all(|(name, x)| match (vars.get(name).and_then(Value::tensor), x.tensor()) {
            (Some(v), Some(x)) => crate::device::cube::same_buffer(v, x),
            _ => false,
        })
    }

    /// Writes this step's feeds and dropout seeds into the recorded buffers, on the
    /// replay's stream.
    fn write_inputs(&self, exec: &Executor, feeds: &BTreeMap<String, HostTensor>, step: i64) -> Result<()> {
        let dev = exec.device.dispatch();
        for (name, fixed) in &self.uploaded.feeds {
            let fed = feeds.get(name).ok_or_else(|| RuntimeError::MissingFeed(name.clone()))?;
            let Some(dst) = fixed.tensor() else { continue };
            let (data, _) = crate::value::host_data(fed, dev, exec.precision);
            if crate::device::cube::write(dst, data) {
                continue;
            }
            // A buffer laid out otherwise than the bytes: upload, then copy on the device.
            if !crate::device::cube::copy(&Value::from_host(fed, dev, exec.precision), fixed) {
                return Err(RuntimeError::Feed {
                    name: name.clone(),
                    reason: "cannot be written into the replayed step's buffer".into(),
                });
            }
        }
        for (id, d) in &self.dropouts {
            let written =
                self.uploaded.seeds.get(id).is_some_and(|t| crate::device::cube::write(t, seed_data(d, step)));
            if !written {
                return Err(RuntimeError::Kernel {
                    node: exec.plan.graph.node(*id).name.clone(),
                    op: "Dropout",
                    reason: "its seed cannot be written into the replayed step's buffer".into(),
                });
            }
        }
        Ok(())
    }

    /// Replays the step, reads its end, and commits it when every check was finite. A
    /// guarded commit, once recorded, is queued right behind the step: the device skips
    /// its copies under a non-finite flag, so the step's read is its only wait. Also says
    /// whether the commit was queued so.
    fn run(&mut self, exec: &Executor) -> Result<(StepOutput, bool)> {
        self.replay_step(exec)?;
        let queued = self.queues_commit();
        if queued {
            self.commit(exec)?;
        }
        let end = self.end.read()?;
        let flagged = end.probes.is_some();
        let non_finite = exec.culprits(&self.probes, end.probes, Vec::new())?;
        if non_finite.is_empty() {
            if !queued {
                self.commit(exec)?;
            } else if flagged {
                // Finite values whose sum overflowed the flag: the device kept the old
                // values, and the host, having counted every probe, commits the new ones.
                self.copy(exec, None)?;
            }
        }
        Ok((StepOutput { fetched: end.fetched, timings: Vec::new(), collectives: Vec::new(), non_finite }, queued))
    }

    /// Replays the step's graph (its inputs written): nothing is committed or read.
    fn replay_step(&self, exec: &Executor) -> Result<()> {
        // SAFETY: every buffer the graph reads or writes stays alive while `self` does:
        // the feeds, the variables and the values it assigns and gathers are held here,
        // and the pages of its intermediates are guarded by cubecl for the graph's life.
        // Feeds are written, and the end read, from this thread's stream, the one the graph
        // was recorded on (the key holds the thread).
        unsafe { B::graph_replay(exec.device.dispatch(), &self.graph) }.map_err(|e| replay_error(exec, e))
    }

    /// Whether the commit is queued behind the step, guarded on the device, with no
    /// host read between them: what a launched step needs.
    fn queues_commit(&self) -> bool {
        self.guarded && !matches!(self.commit, Commit::Unrecorded)
    }

    /// Copies the step's new values into the variables' buffers: the first time for real
    /// (the host has read the flag) and then once more recorded, guarded by the device's
    /// flag where it can be; after that by replaying the recording.
    fn commit(&mut self, exec: &Executor) -> Result<()> {
        let dev = exec.device.dispatch();
        match &self.commit {
            // SAFETY: as for the step's graph; the copies read and write only buffers
            // held here.
            Commit::Graph(g) => return unsafe { B::graph_replay(dev, g) }.map_err(|e| replay_error(exec, e)),
            Commit::Copies => return self.copy(exec, self.guard()),
            Commit::Unrecorded => {}
        }
        self.commit = Commit::Copies;
        let prepared = B::graph_prepare(dev).is_ok();
        self.copy(exec, None)?;
        if !prepared {
            return Ok(());
        }
        if B::graph_start_capture(dev).is_err() {
            let _ = B::graph_stop_capture(dev);
            return Ok(());
        }
        let copied = self.copy(exec, self.guard());
        let graph = B::graph_stop_capture(dev);
        copied?;
        match graph {
            Ok(g) => self.commit = Commit::Graph(g),
            Err(e) => log::warn!("{}: the step's commit is launched copy by copy ({e:?})", exec.device),
        }
        Ok(())
    }

    /// The flag a queued commit's copies read on the device.
    fn guard(&self) -> Option<&crate::value::T> {
        if self.guarded { self.end.flag() } else { None }
    }

    /// Copies every new value into its variable's buffer; under `guard`, only where the
    /// device finds the flag finite, and then the step's end into the mailbox too.
    fn copy(&self, exec: &Executor, guard: Option<&crate::value::T>) -> Result<()> {
        if guard.is_some()
            && let (Some(all), Some(mailbox)) = (self.end.gathered(), &self.mailbox)
            && !crate::device::cube::copy(&Value::Float(all.clone()), &Value::Float(mailbox.clone()))
        {
            return Err(RuntimeError::Device {
                spec: exec.device.to_string(),
                reason: "the step's end could not be copied for a later read".into(),
            });
        }
        for (name, y) in &self.assignments {
            let copied = self.reads.get(name).is_some_and(|x| match guard {
                Some(flag) => crate::device::guarded::copy_if_finite(y, x, flag),
                None => crate::device::cube::copy(y, x),
            });
            if !copied {
                return Err(RuntimeError::Variable {
                    name: name.clone(),
                    reason: format!("the replayed step on {} could not copy its new value", exec.device),
                });
            }
        }
        Ok(())
    }
}

fn replay_error(exec: &Executor, e: burn::backend::ExecutionError) -> RuntimeError {
    RuntimeError::Device { spec: exec.device.to_string(), reason: format!("the step's graph did not replay: {e:?}") }
}

/// The dropout whose mask `op` draws every step: its kernels read the seed from the
/// device in a recorded step (one that draws a mask without it refuses the recording).
fn dropout_of(op: &Op) -> Option<&engine_graph::ops::Dropout> {
    match op {
        Op::Dropout(d) => Some(d),
        Op::FusedAttention(a) => a.dropout.as_ref(),
        Op::FusedAttentionGrad(a) => a.dropout.as_ref(),
        _ => None,
    }
}

/// `d`'s seed at `step` as the mask's kernels take it: one 64-bit integer.
fn seed_data(d: &engine_graph::ops::Dropout, step: i64) -> burn::tensor::TensorData {
    burn::tensor::TensorData::new(vec![crate::kernels::dropout_seed(d, step) as i64], [1])
}

fn seed_tensor(d: &engine_graph::ops::Dropout, step: i64, dev: &burn::backend::DispatchDevice) -> crate::value::T {
    <B as burn::backend::ops::IntTensorOps<B>>::int_from_data(seed_data(d, step), dev)
}
