//! Reading checkpoints back, and choosing which one to resume from.
//!
//! A restarted job should resume from the newest checkpoint that actually loads. TensorFlow fails hard
//! on a truncated or corrupted latest checkpoint; here it is reported (with the file) and the previous
//! kept one is used, since losing a few hundred steps beats losing the run.

use super::error::{CheckpointError, Result};
use super::format::{self, Checkpoint};
use super::manager::CheckpointManager;
use super::name::{checkpoint_name, data_object_name, parse_step, split_checkpoint_path};
use crate::model_dir::{Location, ModelDir, S3Options};

/// The checkpoint `restore_latest_valid` chose, and why each newer one was skipped.
#[derive(Debug)]
pub struct RestoredCheckpoint {
    pub checkpoint: Checkpoint,
    /// Newest first: the state file problem, if any, then each checkpoint that failed to load.
    pub skipped: Vec<CheckpointError>,
}

/// Reads and verifies checkpoint `name` (`model.ckpt-<step>`) of `model_dir`.
pub(crate) fn read_from(model_dir: &ModelDir, name: &str) -> Result<Checkpoint> {
    let data_name = data_object_name(name);
    let url = model_dir.url_of(&data_name);
    let Some(object) = model_dir.get_if_exists(&data_name)? else {
        return Err(CheckpointError::NotFound { url });
    };
    let checkpoint = format::decode(&object.data, &url, name)?;
    if Some(checkpoint.step) != parse_step(name) {
        return Err(CheckpointError::Corrupt {
            url,
            reason: format!("the file records global step {}, its name another", checkpoint.step),
        });
    }
    Ok(checkpoint)
}

/// Opens the directory part of a checkpoint path, refusing (rather than creating) a missing local one.
fn open_dir(dir: &str, s3: Option<&S3Options>, checkpoint: &str) -> Result<ModelDir> {
    if let Location::Local(path) = Location::parse(dir)?
        && !path.is_dir()
    {
        return Err(CheckpointError::NotFound { url: checkpoint.to_string() });
    }
    Ok(ModelDir::open_with(dir, s3)?)
}

/// Reads a checkpoint anywhere, for warm starts and `evaluate(checkpoint_path=...)`: either a checkpoint
/// path (`dir/model.ckpt-200`, with or without `.safetensors`, any model dir URL) or a model dir, whose
/// latest loadable checkpoint is read.
pub fn read_checkpoint(location: &str, s3: Option<&S3Options>) -> Result<Checkpoint> {
    if let Ok((dir, name)) = split_checkpoint_path(location) {
        let model_dir = open_dir(dir.unwrap_or("."), s3, location)?;
        return read_from(&model_dir, &name);
    }
    let manager = CheckpointManager::new(open_dir(location, s3, location)?, 0, None);
    match manager.restore_latest_valid()? {
        Some(restored) => Ok(restored.checkpoint),
        None => Err(CheckpointError::NotFound { url: location.to_string() }),
    }
}

impl CheckpointManager {
    /// Reads checkpoint `path`: a name in this model dir (`model.ckpt-200`, `model.ckpt-200.safetensors`)
    /// or a path into another directory (environment S3 settings; see `read_checkpoint`).
    pub fn restore(&self, path: &str) -> Result<Checkpoint> {
        let (dir, name) = split_checkpoint_path(path)?;
        match dir {
            None => read_from(&self.model_dir, &name),
            Some(dir) if dir == self.model_dir.location() => read_from(&self.model_dir, &name),
            Some(_) => read_checkpoint(path, None),
        }
    }

    /// The newest checkpoint that loads, falling back through older ones, with the reasons
    /// newer ones were skipped. The state file is a hint, not the truth (PostgreSQL's rule
    /// for its control file): a checkpoint whose data is present counts whether the state
    /// file lists it or not (a crash between writing the data and publishing the state file
    /// leaves the newest one unlisted), and one the state file names but whose data is gone,
    /// or a path outside this directory, is skipped with its reason. `Ok(None)` when nothing
    /// was ever saved; an error naming every failure when checkpoints exist but none loads
    /// (starting over silently would discard the run).
    pub fn restore_latest_valid(&self) -> Result<Option<RestoredCheckpoint>> {
        let mut skipped = Vec::new();
        let (listed, named_latest) = match self.read_state() {
            Ok(Some((state, _))) => {
                let latest = split_checkpoint_path(&state.model_checkpoint_path).ok().map(|(_, n)| n);
                (state.all_model_checkpoint_paths, latest)
            }
            Ok(None) => (Vec::new(), None),
            // A damaged state file still leaves the data objects: try them, newest step first.
            Err(e @ CheckpointError::StateFile { .. }) => {
                skipped.push(e);
                (Vec::new(), None)
            }
            Err(e) => return Err(e),
        };
        let mut by_step: std::collections::BTreeMap<u64, String> = std::collections::BTreeMap::new();
        for path in &listed {
            match split_checkpoint_path(path) {
                Ok((_, name)) => {
                    if let Some(step) = parse_step(&name) {
                        by_step.insert(step, name);
                    }
                }
                Err(e) => skipped.push(e),
            }
        }
        for step in self.present()?.into_keys() {
            by_step.insert(step, checkpoint_name(step));
        }
        if by_step.is_empty() && skipped.is_empty() {
            return Ok(None);
        }
        let names: Vec<String> = by_step.into_values().rev().collect();
        for name in names {
            match read_from(&self.model_dir, &name) {
                Ok(checkpoint) => {
                    if named_latest.as_deref().is_some_and(|l| l != name) {
                        log::warn!(
                            "the checkpoint state file names {} as the latest, but {name} is the newest that \
                             loads: resuming from it (the state file is rewritten at the next save)",
                            named_latest.as_deref().unwrap_or_default()
                        );
                    }
                    return Ok(Some(RestoredCheckpoint { checkpoint, skipped }));
                }
                Err(e @ (CheckpointError::Corrupt { .. } | CheckpointError::NotFound { .. })) => skipped.push(e),
                Err(e) => return Err(e),
            }
        }
        if skipped.is_empty() {
            return Ok(None);
        }
        Err(CheckpointError::NoValidCheckpoint {
            dir: self.model_dir.location().to_string(),
            errors: skipped.iter().map(|e| e.to_string()).collect(),
        })
    }
}
