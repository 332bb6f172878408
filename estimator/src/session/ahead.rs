//! The training loop one step ahead of the host (issue 36, item 4).
//!
//! On a GPU a replayed step is one submission, but the device still waited between two
//! steps: for the host to read the step's end, run the hooks, decode the next batch and
//! write it. So the loop queues step k+1 before it reads step k's end:
//!
//! 1. step k+1's batch is pulled and its graph launched (`Replicas::launch`) before step
//!    k's hooks run; its variables are untouched until it commits;
//! 2. when step k+1 comes, its hooks' `before_run` decide its fetches as always. If they
//!    match the launched step's (and it is the step number it was launched as), its commit
//!    is queued and step k+2 is launched before step k+1's end is read; otherwise the
//!    launched step is dropped and the same batch runs as it would have.
//!
//! Step k+1 is launched with the fetches of the last step that asked for what the step
//! before it did, not profiled: a summary step is followed by the usual ones.
//!
//! What a hook sees does not change: `before_run(k)`, then `after_run(k)` with step k's
//! values; a variable a hook reads in `after_run(k)` holds step k's values (step k+1 is not
//! committed yet), and a checkpoint taken there records the input's position before the
//! batch pulled ahead, so a resumed run trains on it. A step whose fetches differ from the
//! usual ones (a summary step) costs one dropped launch. `ENGINE_PIPELINE=off` keeps every
//! step in turn, for comparing.

use super::{Replicas, TrainingSession, replicas::feeds_of};
use crate::{Result, input::IteratorState};
use engine_graph::{HostTensor, Outlet};
use engine_runtime::{Launched, RunOptions, StepOutput};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Turns the pipelined loop off (`off`, `0`, `false`).
pub const PIPELINE_ENV: &str = "ENGINE_PIPELINE";

/// A step's input: one batch per local replica, as feeds.
pub(crate) struct StepInput {
    pub feeds: Vec<BTreeMap<String, HostTensor>>,
    pub ids: Vec<Vec<u64>>,
    /// The step queued on the device ahead of its turn, not committed.
    pub launched: Option<Launched>,
    /// How long pulling the batch took.
    pub wait: Duration,
}

/// What the next step will likely fetch.
#[derive(Default)]
pub(crate) struct Forecast {
    last: Vec<Outlet>,
    steady: Option<Vec<Outlet>>,
}

impl Forecast {
    /// After a step that fetched `fetches`: the fetches of the last step that asked for
    /// what the step before it did (those the steps between summary steps fetch), or
    /// these until two steps agreed.
    fn next(&mut self, fetches: &[Outlet]) -> Vec<Outlet> {
        if self.last == fetches {
            self.steady = Some(fetches.to_vec());
        }
        self.last = fetches.to_vec();
        self.steady.clone().unwrap_or_else(|| fetches.to_vec())
    }
}

/// A batch pulled ahead of its step.
pub(crate) struct Ahead {
    /// The input's position before the batch was pulled: a checkpoint taken while it is
    /// held resumes there, so the batch is trained on.
    pub before: IteratorState,
    /// The batch, or why it could not be read (reported when its step comes).
    pub next: Result<StepInput>,
}

impl Ahead {
    /// Drops the launched step (its batch stays): the variables changed under it.
    pub fn drop_launch(&mut self) {
        if let Ok(input) = &mut self.next {
            input.launched = None;
        }
    }
}

/// Whether the loop may run ahead: one local replica on a queued device, not in a cluster
/// (whose steps agree on a stop request in the graph), and not turned off.
pub(crate) fn pipelines(replicas: &Replicas, in_cluster: bool, agrees_on_stop: bool) -> bool {
    !engine_runtime::switched_off(PIPELINE_ENV)
        && !in_cluster
        && !agrees_on_stop
        && replicas.len() == 1
        && replicas.on_queued_device()
}

impl TrainingSession<'_> {
    /// Runs step `options.step` from `input`: a launched step that matches is committed,
    /// the next one launched, and then this one read; any other runs now. With `ahead`, the
    /// next step's batch is pulled (and launched) before this step's end is read. Returns
    /// the outputs and the time the next batch took to pull.
    pub(crate) fn run_input(
        &mut self,
        input: StepInput,
        fetches: &[Outlet],
        options: RunOptions,
        ahead: bool,
    ) -> Result<(Vec<StepOutput>, Duration)> {
        let StepInput { feeds, ids, launched, .. } = input;
        let launched = launched.filter(|l| l.fetches() == fetches && l.options() == options);
        match (launched, <[_; 1]>::try_from(feeds)) {
            (Some(mut launched), Ok([feeds])) => {
                self.replicas.commit_launched(&mut launched)?;
                let pulled = self.pull_ahead(fetches, options);
                let finished = self.replicas.finish_launched(launched, &feeds);
                let (outs, rerun) = self.label_error(finished, &ids)?;
                if rerun && let Some(a) = &mut self.ahead {
                    a.drop_launch();
                }
                Ok((outs, pulled))
            }
            (_, feeds) => {
                let feeds = feeds.map_or_else(|f| f, Vec::from);
                let ran = self.replicas.run_feeds(feeds, fetches, options);
                let outs = self.label_error(ran, &ids)?;
                let pulled = if ahead { self.pull_ahead(fetches, options) } else { Duration::ZERO };
                Ok((outs, pulled))
            }
        }
    }

    /// Pulls the next step's batch and launches it with the fetches the next step will
    /// likely ask for (`Forecast`); returns the time the input took. Nothing here fails
    /// the step: an input error waits for the step it belongs to, and a launch the device
    /// refuses leaves the batch to run in turn, which reports a real error again.
    fn pull_ahead(&mut self, fetches: &[Outlet], options: RunOptions) -> Duration {
        let fetches = self.forecast.next(fetches);
        let started = Instant::now();
        let before = self.input.state();
        let pulled = self.input.next();
        let wait = started.elapsed();
        let next = match pulled {
            None => return wait,
            Some(Err(e)) => Err(e.into()),
            Some(Ok(batch)) => {
                let ids = vec![batch.ids.clone()];
                let feeds = feeds_of(batch);
                let next = RunOptions { step: options.step + 1, profile: false, ..options };
                let launched = match self.replicas.launch(&feeds, &fetches, next) {
                    Ok(l) => l,
                    Err(e) => {
                        log::debug!("step {} was not launched ahead: {e}", next.step);
                        None
                    }
                };
                Ok(StepInput { feeds: vec![feeds], ids, launched, wait })
            }
        };
        self.ahead = Some(Ahead { before, next });
        wait
    }

    /// The next step's input: the batch pulled ahead, or new ones; `None` (and a stop) when
    /// the input is exhausted.
    pub(crate) fn next_input(
        &mut self,
        stop: &std::cell::Cell<bool>,
        agrees: bool,
        asked: Option<crate::preemption::Signal>,
    ) -> Result<Option<StepInput>> {
        if let Some(a) = self.ahead.take() {
            return a.next.map(Some);
        }
        let started = Instant::now();
        let Some(batches) = self.next_batches(stop, agrees, asked)? else { return Ok(None) };
        let ids = batches.iter().map(|b| b.ids.clone()).collect();
        let feeds = batches.into_iter().map(feeds_of).collect();
        Ok(Some(StepInput { feeds, ids, launched: None, wait: started.elapsed() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_graph::NodeId;

    fn outlets(nodes: &[u32]) -> Vec<Outlet> {
        nodes.iter().map(|&n| Outlet::new(NodeId::new(n as usize), 0)).collect()
    }

    #[test]
    fn the_step_after_a_summary_step_is_launched_with_the_usual_fetches() {
        let (usual, summary) = (outlets(&[1]), outlets(&[1, 2]));
        let mut forecast = Forecast::default();
        // Until two steps agree, the next is forecast to fetch what this one did.
        assert_eq!(forecast.next(&summary), summary);
        assert_eq!(forecast.next(&usual), usual);
        assert_eq!(forecast.next(&usual), usual);
        // A summary step does not change what the steps around it fetch.
        assert_eq!(forecast.next(&summary), usual);
        assert_eq!(forecast.next(&usual), usual);
        // A hook that fetches more from now on: the forecast follows once two steps agree.
        assert_eq!(forecast.next(&summary), usual);
        assert_eq!(forecast.next(&summary), summary);
    }
}
