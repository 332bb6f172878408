//! `CheckpointManager`: saving and publishing checkpoints in a model dir.
//!
//! A save is two steps, in this order:
//! 1. write `model.ckpt-<step>.safetensors` under its final name, in one atomic put (object stores) or
//!    staged + fsync + rename (local disk);
//! 2. publish it by replacing the `checkpoint` state file, conditionally on the version read (S3 `If-Match`,
//!    `If-None-Match` for the first), so that the state file is always one complete version.
//!
//! A crash before step 2 leaves an unlisted data object, which readers ignore and the collector deletes;
//! a crash during step 2 leaves the previous state file. Either way the previous latest checkpoint is
//! still listed and loadable. Garbage collection runs after every publish (see `gc`).

use super::error::{CheckpointError, Result};
use super::format::{self, CheckpointMeta};
use super::lease::{Lease, LeaseInfo, from_unix, list_leases, unix_now};
use super::name::{
    DATA_SUFFIX, PRESERVED_DIR, STATE_FILE, checkpoint_name, data_object_name, parse_step, split_checkpoint_path,
};
use super::retention::{RetentionPolicy, next_state};
use super::state_file::CheckpointState;
use crate::model_dir::{ModelDir, ObjectInfo, ObjectVersion, PutOutcome};
use engine_graph::HostTensor;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// One checkpoint as listed: name (`model.ckpt-<step>`, relative to the model dir, as the state file
/// records it), step, save time, size of its data object, and its full URL or path.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointInfo {
    pub path: String,
    pub step: u64,
    pub created: SystemTime,
    pub size_bytes: u64,
    pub url: String,
}

/// What one garbage-collection pass did. Problems do not fail a save: the checkpoint is already
/// published, and the next pass retries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcReport {
    /// Checkpoints deleted.
    pub deleted: Vec<String>,
    /// Checkpoints due for deletion but leased; retried on a later pass.
    pub held_by_lease: Vec<String>,
    /// Checkpoints this save took out of the list but keeps for good (`keep_checkpoint_every_n_hours`).
    pub preserved: Vec<String>,
    /// Expired lease objects removed.
    pub removed_leases: Vec<String>,
    pub problems: Vec<String>,
}

#[derive(Debug)]
pub struct CheckpointManager {
    pub(crate) model_dir: ModelDir,
    pub(crate) policy: RetentionPolicy,
    /// Seeds `last_preserved_timestamp` when the model dir has none (TensorFlow does the same).
    created_unix: f64,
    last_gc: Mutex<GcReport>,
}

/// What publishing a checkpoint did besides replacing the state file.
struct Published {
    preserved: Vec<String>,
    problems: Vec<String>,
}

/// How many times a save re-reads the state file when another writer replaced it meanwhile.
const PUBLISH_ATTEMPTS: usize = 5;

impl CheckpointManager {
    /// `keep_checkpoint_max` = 0 keeps every checkpoint; `keep_checkpoint_every_n_hours` = `None` never
    /// preserves one beyond the list.
    pub fn new(model_dir: ModelDir, keep_checkpoint_max: usize, keep_checkpoint_every_n_hours: Option<f64>) -> Self {
        Self::with_policy(model_dir, RetentionPolicy { keep_checkpoint_max, keep_checkpoint_every_n_hours })
    }

    pub fn with_policy(model_dir: ModelDir, policy: RetentionPolicy) -> Self {
        CheckpointManager { model_dir, policy, created_unix: unix_now(), last_gc: Mutex::new(GcReport::default()) }
    }

    pub fn model_dir(&self) -> &ModelDir {
        &self.model_dir
    }

    pub fn policy(&self) -> &RetentionPolicy {
        &self.policy
    }

    /// Saves every tensor as checkpoint `model.ckpt-<step>`, publishes it as the latest, then collects
    /// garbage (its outcome: `last_gc_report`).
    pub fn save(
        &self,
        step: u64,
        tensors: &BTreeMap<String, HostTensor>,
        meta: &CheckpointMeta,
    ) -> Result<CheckpointInfo> {
        let name = checkpoint_name(step);
        let data_name = data_object_name(&name);
        let created = unix_now();
        let bytes = format::encode(step, tensors, meta, created)?;
        let size_bytes = bytes.len() as u64;
        self.model_dir.put(&data_name, bytes)?;
        let published = self.publish(&name, created)?;

        let mut report = match self.collect_garbage() {
            Ok(report) => report,
            Err(e) => GcReport { problems: vec![e.to_string()], ..GcReport::default() },
        };
        report.preserved = published.preserved;
        report.problems.extend(published.problems);
        *self.last_gc.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = report;
        Ok(CheckpointInfo {
            path: name,
            step,
            created: from_unix(created),
            size_bytes,
            url: self.model_dir.url_of(&data_name),
        })
    }

    /// The report of the garbage collection that ran after the last `save`.
    pub fn last_gc_report(&self) -> GcReport {
        self.last_gc.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Rewrites the state file to name `name` as latest.
    fn publish(&self, name: &str, created: f64) -> Result<Published> {
        let mut problems = Vec::new();
        for _ in 0..PUBLISH_ATTEMPTS {
            let (previous, version) = match self.model_dir.get_if_exists(STATE_FILE)? {
                None => (None, None),
                Some(object) => {
                    let text = String::from_utf8_lossy(&object.data);
                    // An unreadable state file must not block new checkpoints forever: rebuild the list
                    // from the data objects present, which is what the state file would have named.
                    let state = match CheckpointState::parse(&text, &self.model_dir.url_of(STATE_FILE)) {
                        Ok(state) => state,
                        Err(e) => {
                            problems.push(format!("{e}; rewritten from the checkpoints present"));
                            self.state_from_listing()?
                        }
                    };
                    (Some(state), Some(object.version))
                }
            };
            // Entries whose data is gone (deleted, never written) or that lie past this step (a
            // restart went back to an older checkpoint: that timeline was abandoned) are dropped,
            // so the list names only checkpoints a restart could resume from.
            let previous = match previous {
                Some(mut state) => {
                    let objects = self.data_objects()?;
                    let step = parse_step(name).unwrap_or(u64::MAX);
                    state.retain(|path| {
                        split_checkpoint_path(path).is_ok_and(|(_, listed)| {
                            parse_step(&listed).is_some_and(|s| s <= step)
                                && objects.contains_key(&data_object_name(&listed))
                        })
                    });
                    Some(state)
                }
                None => None,
            };
            let next = next_state(previous.as_ref(), name, created, &self.policy, self.created_unix);
            // Markers first: a crash after them but before the publish leaves checkpoints that are both
            // listed and preserved, which is harmless.
            for (path, saved_at) in &next.preserved {
                let marker = serde_json::json!({ "checkpoint": path, "saved_unix": saved_at });
                self.model_dir.put(&format!("{PRESERVED_DIR}/{path}.json"), marker.to_string().into_bytes())?;
            }
            let text = next.state.to_text().into_bytes();
            let outcome = match &version {
                Some(version) => self.model_dir.put_if_match(STATE_FILE, text, version)?,
                None => self.model_dir.put_if_absent(STATE_FILE, text)?,
            };
            if let PutOutcome::Written(_) = outcome {
                let preserved = next.preserved.into_iter().map(|(p, _)| p).collect();
                return Ok(Published { preserved, problems });
            }
        }
        Err(CheckpointError::ConcurrentUpdate { url: self.model_dir.url_of(STATE_FILE), attempts: PUBLISH_ATTEMPTS })
    }

    /// The parsed state file and its version, or `None` when no checkpoint was ever published.
    pub(crate) fn read_state(&self) -> Result<Option<(CheckpointState, ObjectVersion)>> {
        let Some(object) = self.model_dir.get_if_exists(STATE_FILE)? else { return Ok(None) };
        let text = String::from_utf8(object.data).map_err(|_| CheckpointError::StateFile {
            url: self.model_dir.url_of(STATE_FILE),
            line: 0,
            reason: "not UTF-8 text".into(),
        })?;
        let state = CheckpointState::parse(&text, &self.model_dir.url_of(STATE_FILE))?;
        Ok(Some((state, object.version)))
    }

    /// The `checkpoint` state file, or `None` before the first save.
    pub fn state(&self) -> Result<Option<CheckpointState>> {
        Ok(self.read_state()?.map(|(state, _)| state))
    }

    /// The state file, or when it cannot be read (garbage, empty, cut short) the state
    /// rebuilt from the checkpoints present, with the reason: damage to that small file
    /// must never strand the checkpoints beside it.
    pub fn recovered_state(&self) -> Result<(Option<CheckpointState>, Option<CheckpointError>)> {
        match self.read_state() {
            Ok(state) => Ok((state.map(|(s, _)| s), None)),
            Err(e @ CheckpointError::StateFile { .. }) => {
                let rebuilt = self.state_from_listing()?;
                let state = (!rebuilt.all_model_checkpoint_paths.is_empty()).then_some(rebuilt);
                Ok((state, Some(e)))
            }
            Err(e) => Err(e),
        }
    }

    /// Every `model.ckpt-<step>.safetensors` at the top of the model dir, by name.
    pub(crate) fn data_objects(&self) -> Result<HashMap<String, ObjectInfo>> {
        Ok(self
            .model_dir
            .list("")?
            .into_iter()
            .filter(|info| {
                !info.name.contains('/') && info.name.ends_with(DATA_SUFFIX) && parse_step(&info.name).is_some()
            })
            .map(|info| (info.name.clone(), info))
            .collect())
    }

    /// A state listing every data object present, oldest step first (the recovery for a damaged state file).
    pub(crate) fn state_from_listing(&self) -> Result<CheckpointState> {
        let mut found: Vec<(u64, f64)> = self
            .data_objects()?
            .values()
            .filter_map(|info| {
                let saved = info.last_modified.duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO);
                Some((parse_step(&info.name)?, saved.as_secs_f64()))
            })
            .collect();
        found.sort_by_key(|(step, _)| *step);
        Ok(CheckpointState {
            model_checkpoint_path: found.last().map(|(step, _)| checkpoint_name(*step)).unwrap_or_default(),
            all_model_checkpoint_paths: found.iter().map(|(step, _)| checkpoint_name(*step)).collect(),
            all_model_checkpoint_timestamps: found.iter().map(|(_, t)| *t).collect(),
            last_preserved_timestamp: None,
        })
    }

    pub(crate) fn info(&self, state: &CheckpointState, path: &str, object: &ObjectInfo) -> Option<CheckpointInfo> {
        let (_, name) = split_checkpoint_path(path).ok()?;
        let step = parse_step(&name)?;
        let created = state.timestamp_of(path).map(from_unix).unwrap_or(object.last_modified);
        Some(CheckpointInfo {
            url: self.model_dir.url_of(&object.name),
            path: name,
            step,
            created,
            size_bytes: object.size,
        })
    }

    /// The checkpoints the state file lists (or, when it is damaged, the ones present) and
    /// whose data exists, oldest first: the kept ones, as retention sees them. A leased or
    /// preserved checkpoint is present but not listed.
    pub fn list(&self) -> Result<Vec<CheckpointInfo>> {
        let (Some(state), _) = self.recovered_state()? else { return Ok(Vec::new()) };
        let objects = self.data_objects()?;
        Ok(state
            .all_model_checkpoint_paths
            .iter()
            .filter_map(|path| {
                let (_, name) = split_checkpoint_path(path).ok()?;
                self.info(&state, path, objects.get(&data_object_name(&name))?)
            })
            .collect())
    }

    /// The newest checkpoint whose data exists, whether the state file names it or not: the
    /// state file is a hint, not the truth (a crash between writing a checkpoint's data and
    /// publishing the state file leaves the newest unlisted; one that names a checkpoint
    /// that is gone must not hide the others). `None` before the first save. Whether it
    /// loads is `restore_latest_valid`'s business.
    pub fn latest(&self) -> Result<Option<CheckpointInfo>> {
        let (state, _) = self.recovered_state()?;
        let state = state.unwrap_or_default();
        let newest = self.present()?.pop_last();
        Ok(newest.and_then(|(step, object)| self.info(&state, &checkpoint_name(step), &object)))
    }

    /// Removes `model.ckpt-0` and the state file when that is the model dir's only
    /// checkpoint: what a first run that failed before its first step leaves. Kept, it
    /// would be restored by the next run, which then fails on the failed run's model
    /// (another layer size, another optimizer) until the user deletes the dir. Returns
    /// whether it removed anything.
    pub fn discard_initial(&self) -> Result<bool> {
        let present = self.present()?;
        if present.len() != 1 || !present.contains_key(&0) {
            return Ok(false);
        }
        self.model_dir.delete(&data_object_name(&checkpoint_name(0)))?;
        self.model_dir.delete(STATE_FILE)?;
        Ok(true)
    }

    /// Every checkpoint whose data object is present, by step, listed or not.
    pub(crate) fn present(&self) -> Result<BTreeMap<u64, ObjectInfo>> {
        Ok(self.data_objects()?.into_values().filter_map(|object| Some((parse_step(&object.name)?, object))).collect())
    }

    /// Leases `checkpoint` (`model.ckpt-<step>`) for `holder` (e.g. `evaluator-0`) for `ttl`: the
    /// collector will not delete it while the lease lives. Fails if the checkpoint is already gone.
    pub fn acquire_lease(&self, checkpoint: &str, holder: &str, ttl: Duration) -> Result<Lease> {
        Lease::acquire(&self.model_dir, checkpoint, holder, ttl)
    }

    /// Every lease object, expired or not.
    pub fn leases(&self) -> Result<Vec<LeaseInfo>> {
        Ok(list_leases(&self.model_dir)?.leases)
    }
}
