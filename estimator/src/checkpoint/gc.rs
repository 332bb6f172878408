//! Garbage collection: deleting checkpoints the state file no longer lists.
//!
//! The collector does not remember what it meant to delete; it looks at the model dir. Any
//! `model.ckpt-<step>.safetensors` that the state file does not list, that is older than the latest
//! (smaller step, or written earlier) and that is neither preserved nor leased is garbage. That one rule
//! covers checkpoints pushed out of the list by a save, saves that crashed before publishing, and
//! deletions a previous pass skipped because of a lease or a failure, so a model dir always converges
//! to `keep_checkpoint_max` checkpoints. Newer unlisted objects are left alone: they may be a save in
//! progress.
//!
//! Nothing is deleted while the state file is unreadable: without it, "listed" means nothing.

use super::error::Result;
use super::lease::{LeaseListing, list_leases};
use super::manager::{CheckpointManager, GcReport};
use super::name::{DATA_SUFFIX, PRESERVED_DIR, data_object_name, parse_step, split_checkpoint_path};
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

/// Staging files older than this are debris of a crashed writer, not a write in progress.
const STALE_STAGING_AGE: Duration = Duration::from_secs(3600);

impl CheckpointManager {
    /// One collection pass (also run by every `save`).
    pub fn collect_garbage(&self) -> Result<GcReport> {
        let mut report = GcReport::default();
        let state = match self.read_state() {
            Ok(Some((state, _))) => state,
            Ok(None) => return Ok(report),
            Err(e) => {
                report.problems.push(format!("not collecting garbage: {e}"));
                return Ok(report);
            }
        };
        let listed: BTreeSet<String> = state
            .all_model_checkpoint_paths
            .iter()
            .chain(std::iter::once(&state.model_checkpoint_path))
            .filter_map(|path| split_checkpoint_path(path).ok().map(|(_, name)| name))
            .collect();
        let latest = split_checkpoint_path(&state.model_checkpoint_path).ok().map(|(_, name)| name);
        let latest_step = latest.as_deref().and_then(parse_step);
        let objects = self.data_objects()?;
        let latest_written =
            latest.as_ref().and_then(|name| objects.get(&data_object_name(name))).map(|o| o.last_modified);

        let mut candidates: Vec<(u64, String)> = objects
            .values()
            .filter_map(|object| {
                let name = object.name.strip_suffix(DATA_SUFFIX)?.to_string();
                let step = parse_step(&name)?;
                let older = latest_step.is_some_and(|latest| step < latest)
                    || latest_written.is_some_and(|written| object.last_modified < written);
                (older && !listed.contains(&name)).then_some((step, name))
            })
            .collect();
        candidates.sort();

        let preserved: BTreeSet<String> = self
            .model_dir
            .list(PRESERVED_DIR)?
            .into_iter()
            .filter_map(|info| {
                Some(info.name.strip_prefix(PRESERVED_DIR)?.strip_prefix('/')?.strip_suffix(".json")?.to_string())
            })
            .collect();
        // Leases are read last, right before deleting, to leave a newly acquired one as little time as
        // possible to be missed.
        let LeaseListing { leases, unreadable } = list_leases(&self.model_dir)?;
        let now = SystemTime::now();
        let mut held = BTreeSet::new();
        for lease in leases {
            if lease.is_expired_at(now) {
                match self.model_dir.delete(&lease.object) {
                    Ok(()) => report.removed_leases.push(lease.object),
                    Err(e) => report.problems.push(e.to_string()),
                }
            } else {
                held.insert(lease.checkpoint);
            }
        }
        if !unreadable.is_empty() {
            // An unreadable lease might be protecting anything; keep everything until it is fixed.
            for (object, reason) in unreadable {
                report.problems.push(format!("unreadable lease `{}`: {reason}", self.model_dir.url_of(&object)));
            }
            report.problems.push("deleting no checkpoint while a lease is unreadable".into());
            return Ok(report);
        }

        for (_, name) in candidates {
            if preserved.contains(&name) {
                continue;
            }
            if held.contains(&name) {
                report.held_by_lease.push(name);
                continue;
            }
            match self.model_dir.delete(&data_object_name(&name)) {
                Ok(()) => report.deleted.push(name),
                Err(e) => report.problems.push(e.to_string()),
            }
        }
        self.remove_staging_debris(&mut report);
        Ok(report)
    }

    /// Removes what saves interrupted by a crash left behind: staging files whose writer is
    /// gone, or older than an hour. A training run's chief calls this when it starts.
    pub fn remove_interrupted_saves(&self) -> Result<Vec<std::path::PathBuf>> {
        Ok(self.model_dir.remove_stale_staging_files("", STALE_STAGING_AGE)?)
    }

    fn remove_staging_debris(&self, report: &mut GcReport) {
        if let Err(e) = self.model_dir.remove_stale_staging_files("", STALE_STAGING_AGE) {
            report.problems.push(e.to_string());
        }
    }
}
