//! What a model dir holds, checkpoint by checkpoint, and whether each one loads: what
//! `engine checkpoints` shows, and what an operator needs after a crash or a bad disk.

use super::error::{CheckpointError, Result};
use super::manager::{CheckpointInfo, CheckpointManager};
use super::name::{checkpoint_name, data_object_name, parse_step, split_checkpoint_path};
use super::restore::read_from;
use std::collections::BTreeMap;

/// Whether a checkpoint can be resumed from.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointStatus {
    /// It decodes and its checksums and step agree.
    Loadable,
    /// Its data is there but does not load (why).
    Damaged(String),
    /// The state file lists it but its data is gone.
    Missing,
}

/// One checkpoint of an inventory.
#[derive(Debug, Clone, PartialEq)]
pub struct InventoryEntry {
    /// `model.ckpt-<step>`.
    pub path: String,
    pub step: u64,
    /// Its data object, when present.
    pub info: Option<CheckpointInfo>,
    /// Whether the state file lists it (an unlisted one is garbage, or a save in progress).
    pub listed: bool,
    pub status: CheckpointStatus,
}

/// Every checkpoint a model dir lists or holds, by step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inventory {
    /// Why the state file cannot be read, if it cannot (a run then resumes from the newest
    /// loadable checkpoint and rewrites it).
    pub state_damage: Option<String>,
    pub entries: Vec<InventoryEntry>,
    /// Staging files of saves that did not finish (the next training run removes them).
    pub interrupted_saves: Vec<String>,
}

impl Inventory {
    /// The checkpoint a run would resume from: the newest that loads.
    pub fn resumable(&self) -> Option<&InventoryEntry> {
        self.entries.iter().rev().find(|e| e.status == CheckpointStatus::Loadable)
    }
}

impl CheckpointManager {
    /// Reads every checkpoint the model dir lists or holds and says whether it loads. Reads
    /// each file whole: meant for inspection, not for the training loop.
    pub fn inventory(&self) -> Result<Inventory> {
        let (state, damage) = self.recovered_state()?;
        let listed: Vec<String> = state
            .as_ref()
            .map(|s| {
                s.all_model_checkpoint_paths
                    .iter()
                    .filter_map(|p| split_checkpoint_path(p).ok().map(|(_, n)| n))
                    .collect()
            })
            .unwrap_or_default();
        let present = self.list_present()?;
        let mut steps: BTreeMap<u64, String> = BTreeMap::new();
        for name in listed.iter().chain(present.keys()) {
            if let Some(step) = parse_step(name) {
                steps.insert(step, checkpoint_name(step));
            }
        }
        let mut entries = Vec::new();
        for (step, path) in steps {
            let info = present.get(&path).cloned();
            let status = match &info {
                None => CheckpointStatus::Missing,
                Some(_) => match read_from(&self.model_dir, &path) {
                    Ok(_) => CheckpointStatus::Loadable,
                    Err(e @ (CheckpointError::Corrupt { .. } | CheckpointError::NotFound { .. })) => {
                        CheckpointStatus::Damaged(e.to_string())
                    }
                    Err(e) => return Err(e),
                },
            };
            entries.push(InventoryEntry { listed: listed.contains(&path), path, step, info, status });
        }
        let interrupted_saves = self.model_dir.staging_files("")?;
        Ok(Inventory { state_damage: damage.map(|e| e.to_string()), entries, interrupted_saves })
    }

    /// Every checkpoint data object present, by name, with its size and time.
    fn list_present(&self) -> Result<BTreeMap<String, CheckpointInfo>> {
        let objects = self.data_objects()?;
        let state = super::state_file::CheckpointState::default();
        Ok(objects
            .values()
            .filter_map(|object| {
                let name = checkpoint_name(parse_step(&object.name)?);
                let info = self.info(&state, &name, object)?;
                Some((name, info))
            })
            .filter(|(name, _)| objects.contains_key(&data_object_name(name)))
            .collect())
    }
}
