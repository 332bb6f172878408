//! One executor and one set of variables per local replica.

use crate::{Result, input::Batch, session::compile::{Compiled, LABELS}};
use engine_graph::{HostTensor, Outlet};
use engine_runtime::{Device, Executor, Precision, RunOptions, StepOutput, VariableStore};
use std::collections::BTreeMap;

pub(crate) struct Replicas {
    executors: Vec<Executor>,
    stores: Vec<VariableStore>,
}

impl Replicas {
    pub fn new(compiled: &Compiled, devices: &[Device]) -> Result<Self> {
        let executors = devices
            .iter()
            .map(|d| Executor::new(compiled.plan.clone(), d.clone(), Precision::F32))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let stores = devices.iter().map(|_| VariableStore::new()).collect();
        Ok(Replicas { executors, stores })
    }

    pub fn len(&self) -> usize {
        self.executors.len()
    }

    /// Fresh variables from their initializers (identical on every replica: the seed and
    /// the variable name decide the values).
    pub fn initialize(&mut self, seed: u64) -> Result<()> {
        for (e, s) in self.executors.iter().zip(&mut self.stores) {
            e.initialize(s, seed)?;
        }
        Ok(())
    }

    /// Loads checkpointed values into every replica; variables the checkpoint lacks are
    /// initialized. Returns the names loaded.
    pub fn restore(&mut self, values: &BTreeMap<String, HostTensor>, seed: u64) -> Result<Vec<String>> {
        let mut loaded = Vec::new();
        for (e, s) in self.executors.iter().zip(&mut self.stores) {
            loaded = s.import(&e.plan().graph, values, e.device().dispatch(), e.precision())?;
            e.initialize(s, seed)?;
        }
        Ok(loaded)
    }

    /// The variables of replica 0 (all replicas hold the same values after every step).
    pub fn export(&self) -> Result<BTreeMap<String, HostTensor>> {
        Ok(self.stores.first().map(|s| s.export()).transpose()?.unwrap_or_default())
    }

    /// Runs one step: replica `i` gets `batches[i]`.
    pub fn run(&mut self, batches: Vec<Batch>, fetches: &[Outlet], options: RunOptions) -> Result<Vec<StepOutput>> {
        let mut outs = Vec::with_capacity(self.executors.len());
        for (i, ((e, s), batch)) in self.executors.iter().zip(&mut self.stores).zip(batches).enumerate() {
            let feeds = feeds_of(batch);
            outs.push(e.run(s, &feeds, fetches, RunOptions { replica: i as u64, ..options })?);
        }
        Ok(outs)
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
