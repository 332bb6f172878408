//! A replayed step launched ahead of the host (issue 36, item 4): the training loop queues
//! step k+1 on the device before it reads step k's end, so the device does not wait for the
//! host (its read, its hooks, its next batch) between two steps.
//!
//! A step is launched in three calls:
//! - `launch`: its inputs are written and its graph replayed; nothing is committed or read.
//!   Until it is committed the variables are untouched, so a launched step the host decides
//!   against (a hook asked for other fetches, a stop, a variable assigned) is dropped with
//!   nothing to undo;
//! - `commit`: its guarded commit is queued, and a copy of its end (the flag and the small
//!   fetches) into the mailbox;
//! - `finish`: the mailbox is read. The host reads step k's end after it queued step k+1,
//!   whose replay overwrites the gathered end: hence the copy. Step k+1's graph reads the
//!   variables as step k's commit left them, since the device's queue orders the two.
//!
//! A flagged end names no culprit from the device: the probes and the checked values are
//! step k+1's by then. The device committed nothing (the guard), so the step runs again op
//! by op from the same feeds, which names the culprits as any eager step does, and commits
//! the step when its values prove finite (finite values whose sum overflowed the flag). A
//! step launched after it read the variables before that rerun, so its caller drops it.

use super::{Key, Replay};
use crate::executor::{Executor, RunOptions, StepOutput};
use crate::{Result, RuntimeError, VariableStore};
use engine_graph::{HostTensor, Outlet};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Launched steps committed in this process (a process-wide count, as `device_reads`).
static LAUNCHED: AtomicU64 = AtomicU64::new(0);

/// How many steps this process has committed after launching them ahead of the host: what
/// shows that a training loop ran ahead.
pub fn launched_steps() -> u64 {
    LAUNCHED.load(Ordering::Relaxed)
}

/// A step queued on the device by [`Executor::launch`], not yet read. Dropping it before
/// [`Executor::commit_launched`] leaves the variables as they were.
#[derive(Debug)]
pub struct Launched {
    /// The step's key: its fetches among it.
    key: Key,
    options: RunOptions,
    committed: bool,
}

impl Launched {
    /// What the step fetches, in order.
    pub fn fetches(&self) -> &[Outlet] {
        &self.key.fetches
    }

    pub fn options(&self) -> RunOptions {
        self.options
    }
}

/// A launched step's end.
#[derive(Debug)]
pub struct Finished {
    pub output: StepOutput,
    /// The device's flag was not finite, so the step ran again op by op (and committed if
    /// its values were finite after all): a step launched after this one read the
    /// variables before that, and must be dropped.
    pub rerun: bool,
}

impl Replay {
    /// Writes the step's inputs and replays its graph, when a graph of this step is held
    /// whose commit can be queued behind it; `None` otherwise (the caller runs it).
    pub(in crate::executor) fn launch(
        &self,
        exec: &Executor,
        vars: &VariableStore,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: RunOptions,
    ) -> Result<Option<Launched>> {
        if self.never.is_some() || options.profile {
            return Ok(None);
        }
        let key = Key::new(feeds, fetches, options.replica);
        let mut state = self.lock();
        if state.off.is_some() {
            return Ok(None);
        }
        let Some(at) = state.graphs.iter().position(|c| c.key == key && c.queues_commit() && c.holds(vars)) else {
            return Ok(None);
        };
        state.end_warmup(exec.device.dispatch());
        exec.admit(feeds, fetches, options)?;
        let graph = &state.graphs[at];
        graph.write_inputs(exec, feeds, options.step)?;
        if let Err(e) = graph.replay_step(exec) {
            state.stop(format!("a replay failed: {e}"));
            return Err(e);
        }
        Ok(Some(Launched { key, options, committed: false }))
    }

    /// Queues the launched step's guarded commit and the copy of its end.
    pub(in crate::executor) fn commit_launched(
        &self,
        exec: &Executor,
        vars: &VariableStore,
        launched: &mut Launched,
    ) -> Result<()> {
        if launched.committed {
            return Ok(());
        }
        let mut state = self.lock();
        let at = state.graphs.iter().position(|c| c.key == launched.key && c.holds(vars)).ok_or_else(|| gone(exec))?;
        if let Err(e) = state.graphs[at].commit(exec) {
            state.stop(format!("a replay failed: {e}"));
            return Err(e);
        }
        launched.committed = true;
        if !self.launched_any.swap(true, Ordering::Relaxed) {
            log::info!("{}: each step is queued before the previous one's end is read", exec.device);
        }
        LAUNCHED.fetch_add(1, Ordering::Relaxed);
        self.count(&mut state, at, true);
        Ok(())
    }

    /// Reads the committed step's end from the mailbox; a flagged one runs again op by op
    /// from `feeds` (the step's own).
    pub(in crate::executor) fn finish_launched(
        &self,
        exec: &Executor,
        vars: &mut VariableStore,
        launched: Launched,
        feeds: &BTreeMap<String, HostTensor>,
    ) -> Result<Finished> {
        if !launched.committed {
            return Err(RuntimeError::Device {
                spec: exec.device.to_string(),
                reason: "a launched step was read before its commit was queued".into(),
            });
        }
        let (flagged, fetched) = {
            let state = self.lock();
            let graph = state.graphs.iter().find(|c| c.key == launched.key).ok_or_else(|| gone(exec))?;
            graph.end.read_copy(graph.mailbox.as_ref())?
        };
        if !flagged {
            let output = StepOutput { fetched, timings: Vec::new(), collectives: Vec::new(), non_finite: Vec::new() };
            return Ok(Finished { output, rerun: false });
        }
        let output = exec.run_steps(vars, feeds, launched.fetches(), launched.options, None)?;
        Ok(Finished { output, rerun: true })
    }
}

fn gone(exec: &Executor) -> RuntimeError {
    RuntimeError::Device {
        spec: exec.device.to_string(),
        reason: "the graph of a launched step is no longer held (its variables were replaced)".into(),
    }
}
