//! Runs a compiled plan: one step is one walk of the schedule.
//!
//! The executor is prepared once per plan (slots assigned, constants uploaded, liveness
//! turned into "move or clone" decisions) and then run every step. A value is handed to its
//! last reader by value, so a backend that can compute in place (flex does when a buffer is
//! uniquely owned) reuses the memory; every other value is dropped right after its last
//! use. Variables are read at the start of a step and assignments commit at its end, which
//! makes the order of updates irrelevant to the result, and lets a step that produced a
//! NaN or an infinity (seen by a `CheckNumerics` node) commit nothing at all.

mod replay;

pub use replay::{Finished, Launched, launched_steps};

use crate::shapes::{batch_of, resolve};
use crate::{
    Collective, Device, Exchange, Precision, Result, RuntimeError, Value, VariableStore,
    kernels::{self, Finiteness, KernelCtx},
    readback,
    value::B,
};
use burn::backend::{Backend, ProfileDuration, ProfileOptions, read_sync};
use engine_graph::{Dim, HostTensor, NodeId, Op, Outlet, Plan};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// What varies from step to step besides the feeds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunOptions {
    /// The global step, for ops whose randomness must be reproducible (dropout).
    pub step: i64,
    /// The replica running this step (distinct randomness per replica).
    pub replica: u64,
    /// Record the time of every op (ProfilerHook).
    pub profile: bool,
}

/// The time one op took in a profiled step.
#[derive(Debug, Clone)]
pub struct OpTiming {
    pub node: String,
    pub op: &'static str,
    /// When the host started the op, from the step's start.
    pub start: Duration,
    /// How long the host spent on it: on the CPU the op's whole work; on a queued device
    /// (a GPU) only the launch, since the kernels run later, on the device.
    pub duration: Duration,
    /// On a queued device, when and how long its kernels ran there; `None` on the CPU and
    /// for ops that launch no kernel (a variable read).
    pub device: Option<DeviceTime>,
}

/// An op's kernels on the device, measured by the backend's profiling windows: the
/// device's own timestamps where it has them (`by_device`), else the wall time between
/// two waits for the device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceTime {
    /// From the start of the step's first measured op.
    pub start: Duration,
    pub duration: Duration,
    pub by_device: bool,
}

/// When a collective of a step ran on the communication thread, for overlap measurements.
#[derive(Debug, Clone)]
pub struct CollectiveTiming {
    pub node: String,
    pub start: Duration,
    pub duration: Duration,
    /// How long the compute thread blocked waiting for the result: the rest of
    /// `duration` ran concurrently with computation.
    pub waited: Duration,
    pub bytes: usize,
}

#[derive(Debug, Default)]
pub struct StepOutput {
    pub fetched: Vec<Value>,
    pub timings: Vec<OpTiming>,
    /// Every collective of the step (always recorded: a handful per step).
    pub collectives: Vec<CollectiveTiming>,
    /// The `CheckNumerics` nodes that saw NaN or infinity, by their order. When there is
    /// any, the step committed none of its assignments: the variables are as before it.
    pub non_finite: Vec<NonFinite>,
}

/// A value that a `CheckNumerics` node found not finite.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFinite {
    /// What the value is (`gradient of dense/kernel`).
    pub message: String,
    pub node: String,
    /// The check's rank in its graph (gradients in model order, then updates).
    pub order: usize,
    pub nan: usize,
    pub infinite: usize,
    pub elements: usize,
}

impl NonFinite {
    fn new(
        check: &engine_graph::ops::CheckNumerics,
        node: &engine_graph::Node,
        nan: usize,
        infinite: usize,
        value: &Value,
    ) -> Self {
        NonFinite {
            message: check.message.clone(),
            node: node.name.clone(),
            order: check.order,
            nan,
            infinite,
            elements: value.shape().iter().product(),
        }
    }
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.nan > 0 {
            parts.push(format!("{} NaN", self.nan));
        }
        if self.infinite > 0 {
            parts.push(format!("{} infinite", self.infinite));
        }
        write!(f, "the {} has {} of its {} values", self.message, parts.join(" and "), self.elements)
    }
}

struct CommJob {
    node: NodeId,
    inputs: Vec<Value>,
    reply: mpsc::Sender<CommReply>,
}

type CommReply = (Result<Vec<Value>>, Duration, Duration);

/// What a step in progress holds: values by slot, what it will commit, what its checks
/// found, collectives in flight, timings.
struct Flight {
    slots: Vec<Option<Value>>,
    assignments: Vec<(String, Value)>,
    non_finite: Vec<NonFinite>,
    /// Device-side finiteness probes: (probe, step index, the checked value).
    probes: Vec<(crate::value::T, usize, Value)>,
    timings: Vec<OpTiming>,
    collectives: Vec<CollectiveTiming>,
    /// Launched collectives by step index, and which of their output slots are still
    /// waiting for them.
    launched: HashMap<usize, mpsc::Receiver<CommReply>>,
    waiting: HashMap<usize, usize>,
    /// Device profiling windows by timing index.
    pending: Vec<(usize, ProfileDuration)>,
    /// Outputs their kernels found finite throughout as they wrote them: a check of one
    /// reads nothing. Outlets, not slots, so nothing carries over to another value.
    finite: HashSet<Outlet>,
    /// When the step started; the timings count from it.
    t0: Instant,
}

impl Flight {
    fn new(slots: usize, t0: Instant) -> Self {
        Flight {
            t0,
            slots: vec![None; slots],
            assignments: Vec::new(),
            non_finite: Vec::new(),
            probes: Vec::new(),
            timings: Vec::new(),
            collectives: Vec::new(),
            launched: HashMap::new(),
            waiting: HashMap::new(),
            pending: Vec::new(),
            finite: HashSet::new(),
        }
    }
}

/// What a recorded step reads from buffers written before its capture window (nothing
/// may be written inside it): its feeds by placeholder, and each dropout's seed for the
/// step by node.
pub(super) struct Uploaded {
    feeds: BTreeMap<String, Value>,
    seeds: BTreeMap<NodeId, crate::value::T>,
}

/// Where a step's input comes from.
#[derive(Debug, Clone, Copy)]
enum Input {
    /// A slot of this executor; moved when this is the value's last read.
    Slot(usize, bool),
    /// Another partition's value, delivered through the exchange (a `Transfer`'s input).
    Remote(Outlet),
}

struct Step {
    node: NodeId,
    inputs: Vec<Input>,
    outputs: Vec<usize>,
    free: Vec<usize>,
    /// The outputs a `CheckNumerics` reads, as a mask (outputs past 64 are not asked
    /// about): its kernel is asked whether they are finite throughout (see
    /// [`kernels::Verdict`]).
    checked: u64,
    /// Outputs another partition reads: sent to the exchange when produced.
    exports: Vec<(usize, Outlet)>,
}

pub struct Executor {
    plan: Arc<Plan>,
    device: Device,
    precision: Precision,
    steps: Vec<Step>,
    slot_of: HashMap<Outlet, usize>,
    slots: usize,
    constants: HashMap<NodeId, Value>,
    /// Placeholders fed with labels of a sparse cross entropy, and the class count: labels
    /// are checked on the host, where an out-of-range class can be named.
    label_ranges: Vec<(String, usize)>,
    native_kernels: bool,
    collective: Option<Arc<dyn Collective>>,
    exchange: Option<Arc<Exchange>>,
    replay: replay::Replay,
    memo: kernels::Memo,
}

impl Executor {
    /// An executor for the whole plan.
    pub fn new(plan: Arc<Plan>, device: Device, precision: Precision) -> Result<Self> {
        Self::build(plan, device, precision, None)
    }

    /// An executor for the nodes placed on partition `label` (the host's, the replicas'):
    /// values from other partitions arrive through `exchange` at their `Transfer` nodes,
    /// and values other partitions read are sent to it.
    pub fn for_partition(
        plan: Arc<Plan>,
        device: Device,
        precision: Precision,
        label: engine_graph::Placement,
        exchange: Arc<Exchange>,
    ) -> Result<Self> {
        Self::build(plan, device, precision, Some((label, exchange)))
    }

    fn build(
        plan: Arc<Plan>,
        device: Device,
        precision: Precision,
        partition: Option<(engine_graph::Placement, Arc<Exchange>)>,
    ) -> Result<Self> {
        crate::retain_freed_memory();
        crate::use_compute_threads();
        device.check_precision(precision)?;
        let g = &plan.graph;
        let label = partition.as_ref().map(|p| p.0);
        let mine = |id: NodeId| label.is_none_or(|l| g.node(id).placement == Some(l));
        let order: Vec<NodeId> = plan.schedule.iter().copied().filter(|&id| mine(id)).collect();
        let liveness =
            if partition.is_some() { engine_graph::passes::liveness(g, &order)? } else { plan.liveness.clone() };
        let mut slot_of = HashMap::new();
        for &id in &order {
            for output in 0..g.node(id).outputs.len() {
                let n = slot_of.len();
                slot_of.insert(Outlet::new(id, output), n);
            }
        }
        let mut steps = Vec::with_capacity(order.len());
        let mut constants = HashMap::new();
        let mut assigned: BTreeMap<String, String> = BTreeMap::new();
        let mut label_ranges = Vec::new();
        for (pos, &id) in order.iter().enumerate() {
            let node = g.node(id);
            let err = |reason: String| RuntimeError::Kernel { node: node.name.clone(), op: node.op.name(), reason };
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for (i, o) in node.inputs.iter().enumerate() {
                inputs.push(match slot_of.get(o) {
                    Some(&slot) => Input::Slot(slot, liveness.last_use.contains(&(pos, i))),
                    None if matches!(node.op, Op::Transfer(_)) && partition.is_some() => Input::Remote(*o),
                    None => {
                        return Err(err(format!(
                            "input {o} is produced in another partition and no Transfer carries it"
                        )));
                    }
                });
            }
            let outputs = (0..node.outputs.len()).map(|o| slot_of[&Outlet::new(id, o)]).collect();
            let free = liveness.free_after[pos].iter().filter_map(|o| slot_of.get(o).copied()).collect();
            let mut exports = Vec::new();
            if partition.is_some() {
                for output in 0..node.outputs.len() {
                    let o = Outlet::new(id, output);
                    let remote = g
                        .outlet_consumers(o)
                        .into_iter()
                        .any(|(c, _)| !mine(c) && matches!(g.node(c).op, Op::Transfer(_)));
                    if remote {
                        exports.push((output, o));
                    }
                }
            }
            match &node.op {
                Op::Constant(c) => {
                    constants.insert(id, Value::from_host(&c.value, device.dispatch(), precision));
                }
                Op::Assign(_) => {
                    let var = g.node(node.inputs[0].node).name.clone();
                    if let Some(first) = assigned.insert(var.clone(), node.name.clone()) {
                        return Err(engine_graph::GraphError::DoubleAssign {
                            variable: var,
                            first,
                            second: node.name.clone(),
                        }
                        .into());
                    }
                }
                Op::SparseSoftmaxCrossEntropy(_) => {
                    let labels = g.node(node.inputs[1].node);
                    let classes = g.fact(node.inputs[0])?.shape.dims().last().and_then(|d| d.known());
                    if let (Op::Placeholder(_), Some(c)) = (&labels.op, classes) {
                        label_ranges.push((labels.name.clone(), c));
                    }
                }
                _ => {}
            }
            let checked = (0..node.outputs.len().min(64))
                .filter(|&j| {
                    g.outlet_consumers(Outlet::new(id, j))
                        .iter()
                        .any(|(c, _)| matches!(g.node(*c).op, Op::CheckNumerics(_)))
                })
                .fold(0u64, |mask, j| mask | 1 << j);
            steps.push(Step { node: id, inputs, outputs, free, exports, checked });
        }
        let slots = slot_of.len();
        let replay = replay::Replay::new(&plan, &order, &device, partition.is_some());
        Ok(Executor {
            plan,
            device,
            precision,
            steps,
            slot_of,
            slots,
            constants,
            label_ranges,
            native_kernels: true,
            collective: None,
            exchange: partition.map(|p| p.1),
            replay,
            memo: kernels::Memo::default(),
        })
    }

    /// The group this executor's collective ops (all-reduce) join.
    pub fn with_collective(mut self, collective: Arc<dyn Collective>) -> Self {
        self.collective = Some(collective);
        self
    }

    /// Whether this executor computes `outlet` (a partition computes only its own nodes).
    pub fn owns(&self, outlet: Outlet) -> bool {
        self.slot_of.contains_key(&outlet)
    }

    /// Whether this executor runs any variable (and so needs a variable store).
    pub fn has_variables(&self) -> bool {
        self.steps.iter().any(|s| matches!(self.plan.graph.node(s.node).op, Op::Variable(_)))
    }

    /// Whether steps on a device may be replayed as one captured graph (the default; see
    /// `replay.rs`): tests compare a replayed run with an eager one.
    pub fn with_step_graph(mut self, on: bool) -> Self {
        if !on {
            self.replay = replay::Replay::off();
        }
        self
    }

    /// Why this executor's steps run op by op rather than as a replayed graph, once that
    /// is settled (`None` while it may still replay them).
    pub fn step_graph_refused(&self) -> Option<String> {
        self.replay.refused()
    }

    /// How many steps this executor has run as a replay of its captured graph.
    pub fn replayed_steps(&self) -> u64 {
        self.replay.replayed()
    }

    /// How many replayed steps queued their commit right behind the step, its copies
    /// reading the numerics flag on the device (the rest committed after the host read it).
    pub fn queued_commits(&self) -> u64 {
        self.replay.queued_commits()
    }

    /// Queues a steady-state step on the device without waiting for it: its inputs are
    /// written and its recorded graph replayed, nothing is committed or read. `None` when
    /// the step is not replayed with a guarded commit (yet): the caller runs it with
    /// [`Executor::run`]. The training loop launches step k+1 before it reads step k's end,
    /// so the device always has the next step queued (see `replay/launch.rs`).
    pub fn launch(
        &self,
        vars: &VariableStore,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: RunOptions,
    ) -> Result<Option<Launched>> {
        self.replay.launch(self, vars, feeds, fetches, options)
    }

    /// Queues a launched step's commit (guarded on the device by its numerics flag): from
    /// here on the step counts as run.
    pub fn commit_launched(&self, vars: &VariableStore, launched: &mut Launched) -> Result<()> {
        self.replay.commit_launched(self, vars, launched)
    }

    /// Reads a committed launched step's end: its fetches, or (its flag not finite) the
    /// outcome of running it again op by op from `feeds`, which names the culprits.
    pub fn finish_launched(
        &self,
        vars: &mut VariableStore,
        launched: Launched,
        feeds: &BTreeMap<String, HostTensor>,
    ) -> Result<Finished> {
        self.replay.finish_launched(self, vars, launched, feeds)
    }

    /// Whether the CPU runs the engine's native NHWC kernels (the default) or burn's
    /// generic ones, which every other device uses; tests compare the two.
    pub fn with_native_kernels(mut self, native: bool) -> Self {
        self.native_kernels = native;
        self
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Creates the plan's variables in `vars` that are not there yet.
    pub fn initialize(&self, vars: &mut VariableStore, job_seed: u64) -> Result<()> {
        vars.initialize(&self.plan.graph, job_seed, self.device.dispatch(), self.precision)
    }

    /// Runs one step and returns the values of `fetches`, in order.
    pub fn run(
        &self,
        vars: &mut VariableStore,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: RunOptions,
    ) -> Result<StepOutput> {
        if let Some(out) = self.replay.step(self, vars, feeds, fetches, options)? {
            return Ok(out);
        }
        let Some(group) = self.collective.clone().filter(|_| self.has_collective_ops()) else {
            return self.run_steps(vars, feeds, fetches, options, None);
        };
        // Collectives run on a communication thread, in schedule order (so every replica
        // issues them in the same order), while this thread goes on with the computation
        // that does not need their results.
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::channel::<CommJob>();
            let device = self.device.dispatch().clone();
            let (precision, plan, t0) = (self.precision, self.plan.clone(), Instant::now());
            let max_buffer = self.device.max_buffer_bytes();
            let memo = &self.memo;
            scope.spawn(move || {
                for job in rx {
                    let start = t0.elapsed();
                    let node = plan.graph.node(job.node);
                    let ctx = KernelCtx {
                        node,
                        device: &device,
                        precision,
                        batch: None,
                        step: options.step,
                        replica: options.replica,
                        native: true,
                        collective: Some(group.as_ref()),
                        max_buffer,
                        memo,
                        seed: None,
                        recording: false,
                        verdict: None,
                    };
                    let result = match &node.op {
                        Op::AllReduce(a) => kernels::all_reduce(a, job.inputs, &ctx),
                        Op::AllGatherRows(a) => kernels::all_gather_rows(a, job.inputs, &ctx),
                        _ => Err(ctx.err("not a collective")),
                    };
                    if let Err(e) = &result {
                        group.abort(&format!("{} failed: {e}", node.name), e.is_retryable());
                    }
                    let _ = job.reply.send((result, start, t0.elapsed()));
                }
            });
            let out = self.run_steps(vars, feeds, fetches, options, Some((&tx, t0)));
            drop(tx);
            out
        })
    }

    fn has_collective_ops(&self) -> bool {
        self.steps.iter().any(|s| self.plan.graph.node(s.node).op.is_collective())
    }

    fn run_steps(
        &self,
        vars: &mut VariableStore,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: RunOptions,
        comm: Option<(&mpsc::Sender<CommJob>, Instant)>,
    ) -> Result<StepOutput> {
        let batch = self.admit(feeds, fetches, options)?;
        let t0 = comm.map(|c| c.1).unwrap_or_else(Instant::now);
        let flight = self.walk(vars, feeds, fetches, options, comm, batch, None, t0)?;
        // Only a queued device measures convolution forms: the CPU's steps skip the lock.
        if self.device.is_queued() {
            kernels::report_conv_forms(&self.device.name().to_string());
        }
        self.finish(flight, vars, fetches, batch)
    }

    /// Checks a step's feeds and fetches before anything runs, and returns the batch size
    /// the feeds imply.
    fn admit(
        &self,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: RunOptions,
    ) -> Result<Option<usize>> {
        let batch = self.bind_batch(feeds)?;
        self.check_labels(feeds, options.replica)?;
        self.check_buffer_sizes(batch)?;
        if let Some(missing) = fetches.iter().find(|o| !self.slot_of.contains_key(o)) {
            return Err(RuntimeError::Graph(engine_graph::GraphError::UnknownNode(format!("fetch {missing}"))));
        }
        Ok(batch)
    }

    /// One walk of the schedule, up to the step's end. `uploaded`: what a recorded step
    /// reads from buffers written before its capture window.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        vars: &VariableStore,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: RunOptions,
        comm: Option<(&mpsc::Sender<CommJob>, Instant)>,
        batch: Option<usize>,
        uploaded: Option<&Uploaded>,
        t0: Instant,
    ) -> Result<Flight> {
        let keep: HashSet<usize> = fetches.iter().filter_map(|o| self.slot_of.get(o).copied()).collect();
        let mut flight = Flight::new(self.slots, t0);
        // A profiled step on a queued device opens a window per op on the device's clock:
        // the host only launches there, so its own timings would show the launch.
        let profile_device = options.profile && self.device.is_queued();
        for (index, step) in self.steps.iter().enumerate() {
            let node = self.plan.graph.node(step.node);
            let started = t0.elapsed();
            let inputs = self.gather_inputs(step, &keep, &mut flight, batch)?;
            if let (Some((tx, _)), true) = (comm, node.op.is_collective()) {
                let (reply, rx) = mpsc::channel();
                tx.send(CommJob { node: step.node, inputs, reply }).map_err(|_| RuntimeError::Collective {
                    op: node.name.clone(),
                    reason: "the communication thread stopped".into(),
                    retryable: false,
                })?;
                flight.launched.insert(index, rx);
                for &slot in &step.outputs {
                    flight.waiting.insert(slot, index);
                }
                continue;
            }
            let window = if profile_device { B::profile_start(self.device.dispatch()).ok().flatten() } else { None };
            let outputs = self.compute(index, inputs, vars, feeds, uploaded, &options, batch, &mut flight);
            // Closed even when the op failed: an open window costs the backend until then.
            // Flushed first: under burn's fusion an op's kernels are only queued until a
            // value is needed, so its window would be empty (a profiled step gives up the
            // fusion across ops to time each one).
            let device_time = window.and_then(|w| {
                let _ = B::sync(self.device.dispatch());
                B::profile_end(self.device.dispatch(), w, ProfileOptions::default()).ok()
            });
            self.store(index, outputs?, &mut flight.slots, batch)?;
            for &slot in &step.free {
                if !keep.contains(&slot) && !flight.waiting.contains_key(&slot) {
                    flight.slots[slot] = None;
                }
            }
            if options.profile {
                if let Some(d) = device_time {
                    flight.pending.push((flight.timings.len(), d));
                }
                flight.timings.push(OpTiming {
                    node: node.name.clone(),
                    op: node.op.name(),
                    start: started,
                    duration: t0.elapsed() - started,
                    device: None,
                });
            }
        }
        Ok(flight)
    }

    /// A step's inputs from their slots (a collective's outputs landed first) or, across
    /// partitions, from the exchange. An input read for the last time is moved out.
    fn gather_inputs(
        &self,
        step: &Step,
        keep: &HashSet<usize>,
        flight: &mut Flight,
        batch: Option<usize>,
    ) -> Result<Vec<Value>> {
        let node = self.plan.graph.node(step.node);
        let mut inputs = Vec::with_capacity(step.inputs.len());
        for input in &step.inputs {
            if let Input::Slot(slot, _) = *input
                && let Some(owner) = flight.waiting.get(&slot).copied()
            {
                self.land(owner, flight, batch)?;
            }
            let v = match *input {
                Input::Slot(slot, moved) => {
                    if moved && !keep.contains(&slot) {
                        flight.slots[slot].take()
                    } else {
                        flight.slots[slot].clone()
                    }
                }
                Input::Remote(o) => match &self.exchange {
                    Some(x) => Some(x.recv(o, &node.name)?),
                    None => None,
                },
            };
            inputs.push(v.ok_or_else(|| RuntimeError::Kernel {
                node: node.name.clone(),
                op: node.op.name(),
                reason: "an input was freed before its last use".into(),
            })?);
        }
        Ok(inputs)
    }

    /// Runs step `index` on the host's side of the graph: feeds, variables, constants and
    /// assignments here (an assignment is held until the step commits), checks into the
    /// step's findings or probes, every other op through its kernel.
    #[allow(clippy::too_many_arguments)]
    fn compute(
        &self,
        index: usize,
        mut inputs: Vec<Value>,
        vars: &VariableStore,
        feeds: &BTreeMap<String, HostTensor>,
        uploaded: Option<&Uploaded>,
        options: &RunOptions,
        batch: Option<usize>,
        flight: &mut Flight,
    ) -> Result<Vec<Value>> {
        let g = &self.plan.graph;
        let step = &self.steps[index];
        let node = g.node(step.node);
        Ok(match &node.op {
            Op::Placeholder(_) => match uploaded.and_then(|u| u.feeds.get(&node.name)) {
                Some(v) => vec![v.clone()],
                None => {
                    let fed = feeds.get(&node.name).ok_or_else(|| RuntimeError::MissingFeed(node.name.clone()))?;
                    vec![Value::from_host(fed, self.device.dispatch(), self.precision)]
                }
            },
            Op::Variable(_) => vec![vars.get(&node.name).cloned().ok_or_else(|| RuntimeError::Variable {
                name: node.name.clone(),
                reason: "not initialized or restored".into(),
            })?],
            Op::Constant(_) => vec![self.constants.get(&step.node).cloned().unwrap_or(Value::Unit)],
            Op::Assign(_) => {
                let var = g.node(node.inputs[0].node).name.clone();
                let value = inputs.pop().unwrap_or(Value::Unit);
                flight.assignments.push((var, value.clone()));
                vec![value]
            }
            op => {
                let verdict = (step.checked != 0).then(|| kernels::Verdict::asking(step.checked));
                let ctx = KernelCtx {
                    node,
                    device: self.device.dispatch(),
                    precision: self.precision,
                    batch,
                    step: options.step,
                    replica: options.replica,
                    native: self.native_kernels,
                    collective: self.collective.as_deref(),
                    max_buffer: self.device.max_buffer_bytes(),
                    memo: &self.memo,
                    seed: uploaded.and_then(|u| u.seeds.get(&step.node)),
                    recording: uploaded.is_some(),
                    verdict: verdict.as_ref(),
                };
                match op {
                    Op::CheckNumerics(check) => {
                        let value = inputs.pop().ok_or_else(|| ctx.err("missing input"))?;
                        if node.inputs.first().is_some_and(|o| flight.finite.contains(o)) {
                            return Ok(vec![value]);
                        }
                        match kernels::finiteness(&value, &ctx) {
                            Finiteness::Counted(nan, infinite) if nan + infinite > 0 => {
                                flight.non_finite.push(NonFinite::new(check, node, nan, infinite, &value));
                            }
                            Finiteness::Counted(..) => {}
                            Finiteness::Probe(p) => flight.probes.push((p, index, value.clone())),
                        }
                        vec![value]
                    }
                    op => {
                        let outputs = kernels::run(op, inputs, &ctx)?;
                        if let Some(verdict) = &verdict {
                            for j in (0..outputs.len().min(64)).filter(|&j| verdict.finite(j)) {
                                flight.finite.insert(Outlet::new(step.node, j));
                            }
                        }
                        outputs
                    }
                }
            }
        })
    }

    /// The end of a step: collectives still in flight land, the fetches and the probes'
    /// flag come back in one read, the checks the flag names are counted, and the step's
    /// assignments commit unless a check saw a value that is not finite.
    fn finish(
        &self,
        mut flight: Flight,
        vars: &mut VariableStore,
        fetches: &[Outlet],
        batch: Option<usize>,
    ) -> Result<StepOutput> {
        // Collectives nobody read in this partition still finish (their values may be
        // fetched or sent to another partition).
        let mut rest: Vec<usize> = flight.launched.keys().copied().collect();
        rest.sort_unstable();
        for index in rest {
            self.land(index, &mut flight, batch)?;
        }
        let fetched = self.fetched(&flight, fetches);
        let end = readback::read_back(
            flight.probes.iter().map(|p| p.0.clone()).collect(),
            fetched,
            self.device.is_queued(),
            self.precision,
        )?;
        device_times(&mut flight.timings, flight.pending, flight.t0);
        let non_finite = self.culprits(&flight.probes, end.probes, flight.non_finite)?;
        // The step commits all of its assignments or, when a check saw a value that is not
        // finite, none: a NaN never reaches the variables.
        if non_finite.is_empty() {
            // While a replayed graph reads the variables' buffers, a step run op by op (a
            // profiled one, a logging step's first few) copies its new values into them
            // rather than replacing them, which would drop the graph.
            let into_held = self.replay.holds(vars);
            for (name, value) in flight.assignments {
                if !(into_held && vars.get(&name).is_some_and(|x| crate::device::cube::copy(&value, x))) {
                    vars.set(&name, value);
                }
            }
        }
        Ok(StepOutput { fetched: end.fetched, timings: flight.timings, collectives: flight.collectives, non_finite })
    }

    /// The values of `fetches` as the walk left them (`Unit` for one it did not compute).
    fn fetched(&self, flight: &Flight, fetches: &[Outlet]) -> Vec<Value> {
        fetches
            .iter()
            .map(|o| self.slot_of.get(o).and_then(|&s| flight.slots[s].clone()).unwrap_or(Value::Unit))
            .collect()
    }

    /// Adds to `found` the checks whose probes read back not finite (`flags`, present only
    /// then), each counted exactly, and orders them as the graph does.
    fn culprits(
        &self,
        probes: &[(crate::value::T, usize, Value)],
        flags: Option<Vec<f64>>,
        mut found: Vec<NonFinite>,
    ) -> Result<Vec<NonFinite>> {
        for ((_, index, value), flag) in probes.iter().zip(flags.unwrap_or_default()) {
            if !flag.is_finite() {
                let node = self.plan.graph.node(self.steps[*index].node);
                if let Op::CheckNumerics(check) = &node.op {
                    // A probe is a sum: finite values whose sum overflowed count (0, 0).
                    let (nan, infinite) = kernels::count_non_finite(value)?;
                    if nan + infinite > 0 {
                        found.push(NonFinite::new(check, node, nan, infinite, value));
                    }
                }
            }
        }
        found.sort_by_key(|n| n.order);
        Ok(found)
    }

    /// Stores a step's outputs (checked against their facts) and sends what other
    /// partitions read.
    fn store(
        &self,
        index: usize,
        outputs: Vec<Value>,
        slots: &mut [Option<Value>],
        batch: Option<usize>,
    ) -> Result<()> {
        let step = &self.steps[index];
        for (i, (value, &slot)) in outputs.into_iter().zip(&step.outputs).enumerate() {
            slots[slot] = Some(self.conform(step.node, i, value, batch)?);
        }
        if let Some(x) = &self.exchange {
            for &(output, outlet) in &step.exports {
                if let Some(v) = &slots[step.outputs[output]] {
                    x.send(outlet, v.clone());
                }
            }
        }
        Ok(())
    }

    /// Waits for a launched collective and stores its outputs.
    fn land(&self, index: usize, flight: &mut Flight, batch: Option<usize>) -> Result<()> {
        let Some(rx) = flight.launched.remove(&index) else { return Ok(()) };
        let step = &self.steps[index];
        let node = self.plan.graph.node(step.node);
        let wait_started = Instant::now();
        let (result, start, end) = rx.recv().map_err(|_| RuntimeError::Collective {
            op: node.name.clone(),
            reason: "the communication thread stopped".into(),
            retryable: false,
        })?;
        let waited = wait_started.elapsed();
        let outputs = result?;
        for slot in &step.outputs {
            flight.waiting.remove(slot);
        }
        let bytes = node.outputs.iter().map(|f| f.bytes(batch.unwrap_or(1))).sum();
        let duration = end.saturating_sub(start);
        flight.collectives.push(CollectiveTiming {
            node: node.name.clone(),
            start,
            duration,
            waited: waited.min(duration),
            bytes,
        });
        self.store(index, outputs, &mut flight.slots, batch)
    }

    /// A tensor larger than the device's largest buffer fails inside cubecl with a bare IO
    /// error, once the step is under way; this names the first such node, its size and the
    /// limit before anything runs. Booleans are left out: no device stores them wider than
    /// a float of the same shape. Integers count 4 bytes, as cubecl devices store them.
    fn check_buffer_sizes(&self, batch: Option<usize>) -> Result<()> {
        let Some(max) = self.device.max_buffer_bytes() else { return Ok(()) };
        let float_bytes = self.precision.float_bytes();
        for step in &self.steps {
            let node = self.plan.graph.node(step.node);
            for fact in &node.outputs {
                let width = match fact.dtype {
                    engine_graph::DType::Bool => continue,
                    d if d.is_float() => float_bytes,
                    _ => 4,
                };
                let Some(dims) = resolve(&fact.shape, batch) else { continue };
                let bytes = dims.iter().product::<usize>() as u64 * width;
                if bytes > max {
                    let mb = |b: u64| b as f64 / 1e6;
                    let device = match self.device.hardware() {
                        Some(hw) => format!("{} ({hw})", self.device),
                        None => self.device.to_string(),
                    };
                    return Err(RuntimeError::Kernel {
                        node: node.name.clone(),
                        op: node.op.name(),
                        reason: format!(
                            "its output {dims:?} takes {:.1} MB, more than {device} holds in one buffer \
                             ({:.1} MB): lower the batch size of the input this step reads (`train_input` or `eval_input`)",
                            mb(bytes),
                            mb(max)
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// The batch size the feeds imply; every batch-sized dimension must agree.
    fn bind_batch(&self, feeds: &BTreeMap<String, HostTensor>) -> Result<Option<usize>> {
        let mut batch: Option<(usize, String)> = None;
        for step in &self.steps {
            let node = self.plan.graph.node(step.node);
            let Op::Placeholder(p) = &node.op else { continue };
            let fed = feeds.get(&node.name).ok_or_else(|| RuntimeError::MissingFeed(node.name.clone()))?;
            let err = |reason: String| RuntimeError::Feed { name: node.name.clone(), reason };
            if fed.dtype() != p.dtype {
                return Err(err(format!("expected {} data, got {}", p.dtype, fed.dtype())));
            }
            if fed.shape.len() != p.shape.rank() {
                return Err(err(format!("expected shape {}, got {:?}", p.shape, fed.shape)));
            }
            for (d, &n) in p.shape.dims().iter().zip(&fed.shape) {
                match *d {
                    Dim::Known(k) if k != n => {
                        return Err(err(format!("expected shape {}, got {:?}", p.shape, fed.shape)));
                    }
                    Dim::Batch(k) => {
                        if n % k != 0 {
                            return Err(err(format!("dimension {n} is not a multiple of {k} (shape {})", p.shape)));
                        }
                        match &batch {
                            Some((b, other)) if *b != n / k => {
                                return Err(err(format!("batch size {} differs from {b} fed to '{other}'", n / k)));
                            }
                            Some(_) => {}
                            None => batch = Some((n / k, node.name.clone())),
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(batch.map(|b| b.0))
    }

    fn check_labels(&self, feeds: &BTreeMap<String, HostTensor>, replica: u64) -> Result<()> {
        for (name, classes) in &self.label_ranges {
            let Some(labels) = feeds.get(name).and_then(|t| t.as_i64()) else { continue };
            if let Some((i, bad)) = labels.iter().enumerate().find(|(_, l)| **l < 0 || **l as usize >= *classes) {
                return Err(RuntimeError::LabelOutOfRange {
                    feed: name.clone(),
                    label: *bad,
                    position: i,
                    classes: *classes,
                    replica,
                });
            }
        }
        Ok(())
    }

    /// Checks a kernel's output against the node's fact (after resolving the batch size) and
    /// reshapes where a kernel returns an equivalent shape (burn keeps reduced axes).
    fn conform(&self, id: NodeId, output: usize, value: Value, batch: Option<usize>) -> Result<Value> {
        let node = self.plan.graph.node(id);
        let fact = &node.outputs[output];
        if matches!(value, Value::Unit) {
            return Ok(value);
        }
        let got = value.shape();
        // A partition that is fed nothing (a ps task) meets batch-sized values only in what
        // it receives (a worker's looked-up rows): their shape tells the batch size.
        let batch = batch.or_else(|| batch_of(&fact.shape, &got));
        let expected = resolve(&fact.shape, batch).ok_or_else(|| RuntimeError::Kernel {
            node: node.name.clone(),
            op: node.op.name(),
            reason: format!("output shape {} depends on the batch size, but nothing fed one", fact.shape),
        })?;
        if got == expected {
            return Ok(value);
        }
        if got.iter().product::<usize>() != expected.iter().product::<usize>() {
            return Err(RuntimeError::Kernel {
                node: node.name.clone(),
                op: node.op.name(),
                reason: format!("kernel produced shape {got:?}, the graph expects {expected:?} ({})", fact.shape),
            });
        }
        Ok(value.reshaped(&expected))
    }
}

/// Resolves the device windows of a profiled step into its timings, each op's start
/// counted from the first measured op's. Waits for the device's timestamps: a profiled
/// step is not a steady-state one.
fn device_times(timings: &mut [OpTiming], pending: Vec<(usize, ProfileDuration)>, anchor: Instant) {
    // Offsets from an instant before any device tick maps to; only their differences count.
    let anchor = anchor.checked_sub(Duration::from_secs(3600)).unwrap_or(anchor);
    let mut resolved = Vec::with_capacity(pending.len());
    for (at, window) in pending {
        let by_device = window.timing_method() == burn::backend::TimingMethod::Device;
        if let Some(ticks) = read_sync(window.resolve()) {
            resolved.push((at, ticks, by_device));
        }
    }
    let Some(epoch) = resolved.iter().map(|(_, t, _)| t.start_duration_since(anchor)).min() else { return };
    for (at, ticks, by_device) in resolved {
        if let Some(t) = timings.get_mut(at) {
            t.device = Some(DeviceTime {
                start: ticks.start_duration_since(anchor).saturating_sub(epoch),
                duration: ticks.duration(),
                by_device,
            });
        }
    }
}
