//! The seed's `tf.train.Checkpoint` + `tf.train.CheckpointManager` for a custom loop: the
//! step's variables, the loop's own counters (epoch, step in epoch) and optionally the
//! input position, saved by the chief only and restored by every task.

use super::{DistributedIterator, Step};
use crate::{
    EstimatorError, Result,
    checkpoint::{CheckpointInfo, CheckpointManager, CheckpointMeta},
    input::IteratorState,
    model_dir::ModelDir,
};
use engine_graph::HostTensor;
use std::collections::BTreeMap;

/// What a restored checkpoint recorded besides the variables (which are in the step).
#[derive(Debug, Clone, PartialEq)]
pub struct LoopState {
    /// The checkpoint's name, `model.ckpt-<global step>`.
    pub path: String,
    pub global_step: u64,
    /// The counters passed to [`LoopCheckpointManager::save`].
    pub counters: BTreeMap<String, i64>,
    /// The chief's input position, when an iterator was saved with the checkpoint.
    pub input: Option<IteratorState>,
}

impl LoopState {
    pub fn counter(&self, name: &str) -> Option<i64> {
        self.counters.get(name).copied()
    }
}

/// Keeps the newest checkpoints of a loop in a directory (local or `s3://`). A checkpoint
/// is written whole or not at all (see [`CheckpointManager`]); only the chief writes, so
/// the other tasks of a cluster need no temporary directories of their own.
pub struct LoopCheckpointManager {
    manager: CheckpointManager,
    writes: bool,
}

/// Counters are stored beside the variables, under this prefix, as int64 scalars.
const COUNTER_PREFIX: &str = "loop_counters/";

impl LoopCheckpointManager {
    /// `max_to_keep` 0 keeps every checkpoint; `writes` is false on every task but the chief.
    pub fn new(directory: &str, max_to_keep: usize, writes: bool) -> Result<Self> {
        let dir = ModelDir::open(directory)?;
        Ok(LoopCheckpointManager { manager: CheckpointManager::new(dir, max_to_keep, None), writes })
    }

    /// The directory's checkpoint manager, for listing and inspection.
    pub fn manager(&self) -> &CheckpointManager {
        &self.manager
    }

    /// The newest checkpoint's name, if any (`tf.train.latest_checkpoint`).
    pub fn latest_checkpoint(&self) -> Result<Option<String>> {
        Ok(self.manager.latest()?.map(|c| c.path))
    }

    /// Loads the newest checkpoint that reads back into `step` and returns what the loop
    /// saved with it; `None` (the step keeps its initial values) when there is none. Every
    /// task of a cluster restores from the same directory, which must be shared (a network
    /// file system or an object store); the first step then checks that all agree.
    pub fn restore_or_initialize(&self, step: &mut Step) -> Result<Option<LoopState>> {
        let Some(restored) = self.manager.restore_latest_valid()? else { return Ok(None) };
        for skipped in &restored.skipped {
            log::warn!("Damage in the checkpoint directory: {skipped}");
        }
        let checkpoint = restored.checkpoint;
        let loaded = step.replicas.restore(&checkpoint.tensors, step.seed)?;
        if checkpoint.meta.fingerprint != step.compiled.fingerprint {
            log::warn!(
                "checkpoint {} was written by a step with fingerprint {}, this one is {}; restored by name",
                checkpoint.path,
                checkpoint.meta.fingerprint,
                step.compiled.fingerprint
            );
        }
        log::info!("Restored {} variables from {}", loaded.len(), self.manager.model_dir().url_of(&checkpoint.path));
        step.restored(checkpoint.step);
        let counters = checkpoint
            .tensors
            .iter()
            .filter_map(|(name, t)| {
                let counter = name.strip_prefix(COUNTER_PREFIX)?;
                Some((counter.to_string(), t.scalar_value()? as i64))
            })
            .collect();
        let input = match checkpoint.meta.input_state.as_str() {
            "" => None,
            json => Some(IteratorState::from_json(json)?),
        };
        Ok(Some(LoopState { path: checkpoint.path, global_step: checkpoint.step, counters, input }))
    }

    /// Saves the step's variables at its global step, with `counters` and, when given, the
    /// input position (a loop that saves mid-epoch resumes there). On tasks other than the
    /// chief nothing is written and `None` returned.
    pub fn save(
        &self,
        step: &Step,
        counters: &[(&str, i64)],
        iterator: Option<&DistributedIterator>,
    ) -> Result<Option<CheckpointInfo>> {
        if !self.writes {
            return Ok(None);
        }
        let mut tensors: BTreeMap<String, HostTensor> = step.variables()?;
        for (name, value) in counters {
            if name.is_empty() || name.len() > 200 {
                return Err(EstimatorError::Other(format!(
                    "a checkpoint counter needs a name of 1 to 200 bytes: '{name}'"
                )));
            }
            tensors.insert(format!("{COUNTER_PREFIX}{name}"), HostTensor::scalar_i64(*value));
        }
        let input_state = match iterator {
            Some(it) => it.state().to_json()?,
            None => String::new(),
        };
        let meta = CheckpointMeta { fingerprint: step.compiled.fingerprint.clone(), input_state, examples_seen: None };
        let info = self.manager.save(step.global_step(), &tensors, &meta)?;
        for problem in self.manager.last_gc_report().problems {
            log::warn!("after saving {}: {problem}", info.path);
        }
        Ok(Some(info))
    }
}
