//! Steps launched ahead of the host, for a single replica on a device (see the runtime's
//! `Executor::launch`): only there is a step one replayed graph the loop can queue early.
//! Several replicas, a host partition or ps tasks exchange values inside the step, which a
//! replayed graph does not (the executor never replays their plans).

use super::Replicas;
use crate::Result;
use engine_graph::{HostTensor, Outlet};
use engine_runtime::{Launched, RunOptions, StepOutput};
use std::collections::BTreeMap;

impl Replicas {
    /// Queues the step on the device, when it is a single replica's replayed step: `None`
    /// (nothing done) otherwise.
    pub fn launch(
        &mut self,
        feeds: &BTreeMap<String, HostTensor>,
        fetches: &[Outlet],
        options: RunOptions,
    ) -> Result<Option<Launched>> {
        let [w] = &mut self.workers[..] else { return Ok(None) };
        if self.remote.is_some() || self.exchange.is_some() || !self.collectives.is_empty() {
            return Ok(None);
        }
        if !fetches.iter().all(|o| w.exec.owns(*o)) {
            return Ok(None);
        }
        Ok(w.exec.launch(&w.store, feeds, fetches, RunOptions { replica: 0, ..options })?)
    }

    /// Queues a launched step's commit: from here on it counts as run.
    pub fn commit_launched(&mut self, launched: &mut Launched) -> Result<()> {
        let w = &self.workers[0];
        Ok(w.exec.commit_launched(&w.store, launched)?)
    }

    /// A committed launched step's outputs (one replica's), and whether it ran again op
    /// by op (its device flag was not finite): a step launched after it must be dropped.
    pub fn finish_launched(
        &mut self,
        launched: Launched,
        feeds: &BTreeMap<String, HostTensor>,
    ) -> Result<(Vec<StepOutput>, bool)> {
        let w = &mut self.workers[0];
        let finished = w.exec.finish_launched(&mut w.store, launched, feeds)?;
        Ok((vec![finished.output], finished.rerun))
    }
}
