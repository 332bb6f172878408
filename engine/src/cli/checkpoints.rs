//! `engine checkpoints MODEL_DIR`: every checkpoint the model dir lists or holds, with step,
//! save time (UTC), size and whether it loads (`ok`, `DAMAGED`, `MISSING`), which one a run
//! resumes from, the leases evaluators hold, a damaged state file and interrupted saves.

use super::CliError;
use super::utc::utc;
use clap::Args;
use engine_estimator::{
    EstimatorError,
    checkpoint::{CheckpointManager, CheckpointStatus, Inventory, LeaseInfo},
    model_dir::ModelDir,
};
use std::fmt::Write;
use std::time::SystemTime;

#[derive(Debug, Args)]
pub struct CheckpointsArgs {
    /// A local path or a URL (`file://`, `s3://bucket/prefix`; S3 settings from the usual
    /// `AWS_*` environment variables).
    pub model_dir: String,
}

pub fn checkpoints(args: &CheckpointsArgs) -> Result<(), CliError> {
    let location = &args.model_dir;
    require_existing(location)?;
    let model_dir = ModelDir::open(location).map_err(EstimatorError::from)?;
    // A manager that never saves, so its retention policy never applies.
    let manager = CheckpointManager::new(model_dir.clone(), 0, None);
    let inventory = manager.inventory().map_err(EstimatorError::from)?;
    let leases = manager.leases().map_err(EstimatorError::from)?;
    super::output(&table(&model_dir, &inventory, &leases, SystemTime::now()));
    Ok(())
}

/// Opening a local model dir creates it, as training wants; commands that only read one
/// must not, and say so when it is missing (a mistyped path, usually).
pub(super) fn require_existing(location: &str) -> Result<(), CliError> {
    let local = location.strip_prefix("file://").unwrap_or(location);
    if (!location.contains("://") || location.starts_with("file://")) && !std::path::Path::new(local).is_dir() {
        return Err(CliError::Estimator(EstimatorError::Other(format!(
            "model dir {location} does not exist: train with `engine run` first, or name the one the model was \
             trained in with --model-dir DIR"
        ))));
    }
    Ok(())
}

fn table(model_dir: &ModelDir, inventory: &Inventory, leases: &[LeaseInfo], now: SystemTime) -> String {
    let mut out = String::new();
    if inventory.entries.is_empty() && inventory.state_damage.is_none() && inventory.interrupted_saves.is_empty() {
        let _ = writeln!(out, "no checkpoints in {model_dir}");
        return out;
    }
    let _ = writeln!(out, "checkpoints in {model_dir}:");
    let entries = &inventory.entries;
    let width = entries.iter().map(|c| c.path.len()).max().unwrap_or(0).max("PATH".len());
    let _ = writeln!(
        out,
        "{:<width$}  {:>10}  {:<19}  {:>10}  {:<7}  NOTE",
        "PATH", "STEP", "CREATED (UTC)", "SIZE", "STATUS"
    );
    let resumable = inventory.resumable().map(|e| e.step);
    for c in entries {
        let mut notes = Vec::new();
        let status = match &c.status {
            CheckpointStatus::Loadable => "ok",
            CheckpointStatus::Damaged(why) => {
                notes.push(why.clone());
                "DAMAGED"
            }
            CheckpointStatus::Missing => {
                notes.push("the state file lists it, its data is gone".to_string());
                "MISSING"
            }
        };
        if resumable == Some(c.step) {
            notes.insert(0, "latest".to_string());
        }
        if !c.listed && c.info.is_some() {
            notes.push("not listed".to_string());
        }
        for lease in leases.iter().filter(|l| l.checkpoint == c.path) {
            notes.push(lease_note(lease, now));
        }
        let (created, bytes) = match &c.info {
            Some(info) => (utc(info.created), size(info.size_bytes)),
            None => ("-".to_string(), "-".to_string()),
        };
        let _ = write!(
            out,
            "{:<width$}  {:>10}  {:<19}  {:>10}  {:<7}  {}",
            c.path,
            c.step,
            created,
            bytes,
            status,
            notes.join(", ")
        );
        out.truncate(out.trim_end_matches(' ').len());
        out.push('\n');
    }
    // Leases on checkpoints no longer there (garbage waiting for them).
    for lease in leases.iter().filter(|l| !entries.iter().any(|c| c.path == l.checkpoint)) {
        let _ = writeln!(out, "{} (not listed): {}", lease.checkpoint, lease_note(lease, now));
    }
    if let Some(why) = &inventory.state_damage {
        let _ = writeln!(
            out,
            "the state file is damaged ({why}): the list above is rebuilt from the files, and the next run's first save rewrites it"
        );
    }
    for name in &inventory.interrupted_saves {
        let _ = writeln!(out, "{name}: an interrupted save (the next training run removes it)");
    }
    if resumable.is_none() && !entries.is_empty() {
        let _ = writeln!(out, "no checkpoint loads: a run would start from scratch only after these are moved away");
    }
    out
}

fn lease_note(lease: &LeaseInfo, now: SystemTime) -> String {
    let state = if lease.is_expired_at(now) { "expired" } else { "until" };
    format!("leased by {} {state} {}", lease.holder, utc(lease.expires))
}

/// `1.5 MiB`, `812 B`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_table_marks_the_latest_leases_and_damage() -> Result<(), Box<dyn std::error::Error>> {
        use engine_estimator::checkpoint::{CheckpointInfo, InventoryEntry};
        let dir = ModelDir::open("memory://cli-checkpoints-table/run")?;
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let entry = |step: u64, status: CheckpointStatus| InventoryEntry {
            path: format!("model.ckpt-{step}"),
            step,
            info: (status != CheckpointStatus::Missing).then(|| CheckpointInfo {
                path: format!("model.ckpt-{step}"),
                step,
                created: at(1_700_000_000 + step),
                size_bytes: 1536 * step,
                url: String::new(),
            }),
            listed: true,
            status,
        };
        let lease = |checkpoint: &str, expires: u64| LeaseInfo {
            checkpoint: checkpoint.into(),
            holder: "evaluator-0".into(),
            expires: at(expires),
            object: String::new(),
        };
        let leases = [lease("model.ckpt-100", 1_800_000_000), lease("model.ckpt-50", 1_600_000_000)];
        let inventory = Inventory {
            state_damage: None,
            entries: vec![entry(100, CheckpointStatus::Loadable), entry(200, CheckpointStatus::Loadable)],
            interrupted_saves: Vec::new(),
        };
        let text = table(&dir, &inventory, &leases, at(1_700_000_500));
        let want = "checkpoints in memory://cli-checkpoints-table/run:
PATH                  STEP  CREATED (UTC)              SIZE  STATUS   NOTE
model.ckpt-100         100  2023-11-14 22:15:00   150.0 KiB  ok       leased by evaluator-0 until 2027-01-15 08:00:00
model.ckpt-200         200  2023-11-14 22:16:40   300.0 KiB  ok       latest
model.ckpt-50 (not listed): leased by evaluator-0 expired 2020-09-13 12:26:40
";
        assert_eq!(text, want);
        let damaged = Inventory {
            state_damage: Some("line 1: garbage".into()),
            entries: vec![
                entry(100, CheckpointStatus::Loadable),
                entry(200, CheckpointStatus::Damaged("cut short".into())),
                entry(300, CheckpointStatus::Missing),
            ],
            interrupted_saves: vec!["model.ckpt-400.safetensors#123000001".into()],
        };
        let text = table(&dir, &damaged, &[], at(1_700_000_500));
        let want = "checkpoints in memory://cli-checkpoints-table/run:
PATH                  STEP  CREATED (UTC)              SIZE  STATUS   NOTE
model.ckpt-100         100  2023-11-14 22:15:00   150.0 KiB  ok       latest
model.ckpt-200         200  2023-11-14 22:16:40   300.0 KiB  DAMAGED  cut short
model.ckpt-300         300  -                             -  MISSING  the state file lists it, its data is gone
the state file is damaged (line 1: garbage): the list above is rebuilt from the files, and the next run's first save rewrites it
model.ckpt-400.safetensors#123000001: an interrupted save (the next training run removes it)
";
        assert_eq!(text, want);
        assert_eq!(
            table(&dir, &Inventory::default(), &[], at(0)),
            "no checkpoints in memory://cli-checkpoints-table/run\n"
        );
        Ok(())
    }

    #[test]
    fn sizes_are_human() {
        assert_eq!(size(812), "812 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 * 1024 * 1024), "3.0 MiB");
    }
}
