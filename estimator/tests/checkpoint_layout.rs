//! The model dir as checkpoints leave it: state file content, retention, leases, corruption fallback,
//! and the same layout whichever way the directory is addressed.

use anyhow::{Context, Result, bail, ensure};
use engine_estimator::checkpoint::{CheckpointError, CheckpointManager, CheckpointMeta, CheckpointState, STATE_FILE};
use engine_estimator::model_dir::ModelDir;
use engine_graph::HostTensor;
use std::collections::BTreeMap;
use std::time::Duration;

fn variables(step: u64) -> Result<BTreeMap<String, HostTensor>> {
    let s = step as f32;
    let mut vars = BTreeMap::new();
    vars.insert("dense/kernel".into(), HostTensor::f32(vec![2, 2], vec![s, s + 0.5, -s, 1.0])?);
    vars.insert("dense/kernel/Adam".into(), HostTensor::f32(vec![2, 2], vec![0.25; 4])?);
    vars.insert("dense/bias".into(), HostTensor::f32(vec![2], vec![s / 10.0, 0.0])?);
    vars.insert("global_step".into(), HostTensor::scalar_i64(step as i64));
    Ok(vars)
}

fn meta(step: u64) -> CheckpointMeta {
    CheckpointMeta {
        fingerprint: "fp-test".into(),
        input_state: format!(r#"{{"batches_consumed":{step}}}"#),
        examples_seen: None,
    }
}

fn names(dir: &ModelDir) -> Result<Vec<String>> {
    Ok(dir.list("")?.into_iter().map(|i| i.name).collect())
}

/// Saves steps 100..=500 with keep 3 and checks everything a user or TensorFlow would look at.
fn check_layout(dir: ModelDir) -> Result<Vec<String>> {
    let manager = CheckpointManager::new(dir.clone(), 3, None);
    assert!(manager.latest()?.is_none());
    assert!(manager.restore_latest_valid()?.is_none());
    for step in [100, 200, 300, 400, 500] {
        let info = manager.save(step, &variables(step)?, &meta(step))?;
        assert_eq!(info.path, format!("model.ckpt-{step}"));
        assert!(info.size_bytes > 0);
    }
    let layout = names(&dir)?;
    assert_eq!(
        layout,
        vec!["checkpoint", "model.ckpt-300.safetensors", "model.ckpt-400.safetensors", "model.ckpt-500.safetensors"],
        "in {dir}"
    );
    let text = String::from_utf8(dir.get(STATE_FILE)?)?;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "model_checkpoint_path: \"model.ckpt-500\"",
            "all_model_checkpoint_paths: \"model.ckpt-300\"",
            "all_model_checkpoint_paths: \"model.ckpt-400\"",
            "all_model_checkpoint_paths: \"model.ckpt-500\"",
        ],
        "{text}"
    );
    assert_eq!(lines.iter().filter(|l| l.starts_with("all_model_checkpoint_timestamps: ")).count(), 3, "{text}");
    assert!(lines.iter().any(|l| l.starts_with("last_preserved_timestamp: ")), "{text}");

    let listed: Vec<u64> = manager.list()?.iter().map(|c| c.step).collect();
    assert_eq!(listed, vec![300, 400, 500]);
    assert_eq!(manager.latest()?.map(|c| c.step), Some(500));
    let restored = manager.restore_latest_valid()?.context("nothing to restore")?;
    assert!(restored.skipped.is_empty());
    assert_eq!(restored.checkpoint.tensors, variables(500)?);
    assert_eq!(restored.checkpoint.meta, meta(500));
    assert_eq!(manager.restore("model.ckpt-400.safetensors")?.tensors, variables(400)?);
    assert!(matches!(manager.restore("model.ckpt-100"), Err(CheckpointError::NotFound { .. })));
    Ok(layout)
}

#[test]
fn memory_layout_after_several_saves() -> Result<()> {
    check_layout(ModelDir::open("memory://ckpt-layout/run")?)?;
    Ok(())
}

#[test]
fn local_path_and_file_url_give_the_same_layout() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let plain = check_layout(ModelDir::open(&tmp.path().join("plain").to_string_lossy())?)?;
    let url = check_layout(ModelDir::open(&format!("file://{}", tmp.path().join("url").display()))?)?;
    assert_eq!(plain, url);
    // And the files are really there, with no staging debris.
    let mut on_disk: Vec<String> = std::fs::read_dir(tmp.path().join("url"))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    on_disk.sort();
    assert_eq!(on_disk, url);
    Ok(())
}

#[test]
fn memory_dirs_with_the_same_name_share_checkpoints() -> Result<()> {
    let chief = CheckpointManager::new(ModelDir::open("memory://ckpt-shared/job")?, 2, None);
    chief.save(7, &variables(7)?, &meta(7))?;
    let evaluator = CheckpointManager::new(ModelDir::open("memory://ckpt-shared/job")?, 2, None);
    assert_eq!(evaluator.latest()?.map(|c| c.step), Some(7));
    let other = CheckpointManager::new(ModelDir::open("memory://ckpt-shared-other/job")?, 2, None);
    assert!(other.latest()?.is_none());
    Ok(())
}

#[test]
fn keep_zero_keeps_everything() -> Result<()> {
    let manager = CheckpointManager::new(ModelDir::open("memory://ckpt-keep-all/run")?, 0, None);
    for step in 1..=7 {
        manager.save(step, &variables(step)?, &meta(step))?;
    }
    assert_eq!(manager.list()?.len(), 7);
    Ok(())
}

#[test]
fn a_lease_blocks_garbage_collection_until_released() -> Result<()> {
    let dir = ModelDir::open("memory://ckpt-lease/run")?;
    let chief = CheckpointManager::new(dir.clone(), 2, None);
    chief.save(1, &variables(1)?, &meta(1))?;
    // The evaluator leases the latest checkpoint and starts reading it.
    let evaluator = CheckpointManager::new(ModelDir::open("memory://ckpt-lease/run")?, 2, None);
    let latest = evaluator.latest()?.context("no latest")?;
    let lease = evaluator.acquire_lease(&latest.path, "evaluator-0", Duration::from_secs(600))?;
    assert_eq!(evaluator.leases()?.len(), 1);

    // The chief moves on: step 1 falls out of the list but must survive.
    chief.save(2, &variables(2)?, &meta(2))?;
    chief.save(3, &variables(3)?, &meta(3))?;
    let report = chief.last_gc_report();
    assert_eq!(report.held_by_lease, vec!["model.ckpt-1"]);
    assert!(dir.exists("model.ckpt-1.safetensors")?);
    assert_eq!(evaluator.restore(lease.checkpoint())?.tensors, variables(1)?);
    let listed: Vec<u64> = chief.list()?.iter().map(|c| c.step).collect();
    assert_eq!(listed, vec![2, 3], "a leased checkpoint is still dropped from the state file");

    // Released, it goes at the next collection.
    lease.release()?;
    chief.save(4, &variables(4)?, &meta(4))?;
    assert_eq!(chief.last_gc_report().deleted, vec!["model.ckpt-1", "model.ckpt-2"]);
    assert_eq!(names(&dir)?, vec!["checkpoint", "model.ckpt-3.safetensors", "model.ckpt-4.safetensors"]);
    Ok(())
}

#[test]
fn an_expired_lease_no_longer_protects() -> Result<()> {
    let dir = ModelDir::open("memory://ckpt-lease-expiry/run")?;
    let chief = CheckpointManager::new(dir.clone(), 1, None);
    chief.save(1, &variables(1)?, &meta(1))?;
    let lease = chief.acquire_lease("model.ckpt-1", "slow-evaluator", Duration::from_millis(1))?;
    std::thread::sleep(Duration::from_millis(20));
    chief.save(2, &variables(2)?, &meta(2))?;
    let report = chief.last_gc_report();
    assert_eq!(report.deleted, vec!["model.ckpt-1"]);
    assert_eq!(report.removed_leases, vec!["leases/model.ckpt-1.slow-evaluator.json"]);
    drop(lease);
    Ok(())
}

#[test]
fn a_flipped_byte_is_reported_with_the_file_and_restore_falls_back() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = ModelDir::open(&tmp.path().to_string_lossy())?;
    let manager = CheckpointManager::new(dir.clone(), 3, None);
    for step in [10, 20, 30] {
        manager.save(step, &variables(step)?, &meta(step))?;
    }
    let file = tmp.path().join("model.ckpt-30.safetensors");
    let mut bytes = std::fs::read(&file)?;
    let last = bytes.len() - 3; // inside the tensor data, past the JSON header
    bytes[last] ^= 0x01;
    std::fs::write(&file, &bytes)?;

    let direct = manager.restore("model.ckpt-30").err().context("a corrupted checkpoint loaded")?;
    let message = direct.to_string();
    assert!(message.contains(&file.to_string_lossy().into_owned()) && message.contains("checksum"), "{message}");

    let restored = manager.restore_latest_valid()?.context("no fallback")?;
    assert_eq!(restored.checkpoint.step, 20);
    assert_eq!(restored.skipped.len(), 1);
    assert!(restored.skipped[0].to_string().contains("model.ckpt-30.safetensors"), "{:?}", restored.skipped);
    Ok(())
}

#[test]
fn all_checkpoints_corrupt_is_an_error_naming_each() -> Result<()> {
    let dir = ModelDir::open("memory://ckpt-all-corrupt/run")?;
    let manager = CheckpointManager::new(dir.clone(), 2, None);
    manager.save(1, &variables(1)?, &meta(1))?;
    manager.save(2, &variables(2)?, &meta(2))?;
    for name in ["model.ckpt-1.safetensors", "model.ckpt-2.safetensors"] {
        dir.put(name, b"garbage".to_vec())?;
    }
    let Err(CheckpointError::NoValidCheckpoint { errors, .. }) = manager.restore_latest_valid() else {
        bail!("expected NoValidCheckpoint");
    };
    assert_eq!(errors.len(), 2);
    assert!(
        errors[0].contains("model.ckpt-2.safetensors") && errors[1].contains("model.ckpt-1.safetensors"),
        "{errors:?}"
    );
    Ok(())
}

#[test]
fn a_damaged_state_file_is_reported_and_recovered_from() -> Result<()> {
    let dir = ModelDir::open("memory://ckpt-bad-state/run")?;
    let manager = CheckpointManager::new(dir.clone(), 2, None);
    manager.save(1, &variables(1)?, &meta(1))?;
    manager.save(2, &variables(2)?, &meta(2))?;
    dir.put(STATE_FILE, b"model_checkpoint_path: \"model.ckpt-2\"\ngarbage here\n".to_vec())?;

    // The damage is reported, and the checkpoints beside the file still count: the latest is
    // the newest present.
    let (_, damage) = manager.recovered_state()?;
    let message = damage.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("memory://ckpt-bad-state/run/checkpoint") && message.contains("line 2"), "{message}");
    assert_eq!(manager.latest()?.map(|c| c.step), Some(2));
    // Nothing is deleted while the state is unreadable.
    assert!(!manager.collect_garbage()?.problems.is_empty());

    let restored = manager.restore_latest_valid()?.context("no fallback")?;
    assert_eq!(restored.checkpoint.step, 2);
    assert!(matches!(restored.skipped[..], [CheckpointError::StateFile { .. }]));
    // The next save rewrites a valid state file.
    manager.save(3, &variables(3)?, &meta(3))?;
    assert!(
        manager.last_gc_report().problems.iter().any(|p| p.contains("rewritten")),
        "{:?}",
        manager.last_gc_report()
    );
    let state = manager.state()?.context("no state")?;
    assert_eq!(state.all_model_checkpoint_paths, vec!["model.ckpt-2", "model.ckpt-3"]);
    Ok(())
}

#[test]
fn orphans_of_a_crashed_save_are_collected() -> Result<()> {
    let dir = ModelDir::open("memory://ckpt-orphans/run")?;
    let manager = CheckpointManager::new(dir.clone(), 2, None);
    manager.save(1, &variables(1)?, &meta(1))?;
    manager.save(2, &variables(2)?, &meta(2))?;
    // A save that wrote its data and died before publishing.
    dir.put("model.ckpt-3.safetensors", b"complete but unpublished".to_vec())?;
    // Left by an earlier run that got further before it restarted from an older checkpoint.
    dir.put("model.ckpt-9.safetensors", b"stale".to_vec())?;
    // A checkpoint a previous process failed to delete.
    dir.put("model.ckpt-0.safetensors", b"old".to_vec())?;

    manager.save(4, &variables(4)?, &meta(4))?;
    let mut deleted = manager.last_gc_report().deleted;
    deleted.sort();
    assert_eq!(deleted, vec!["model.ckpt-0", "model.ckpt-1", "model.ckpt-3", "model.ckpt-9"]);
    assert_eq!(names(&dir)?, vec!["checkpoint", "model.ckpt-2.safetensors", "model.ckpt-4.safetensors"]);

    // An unlisted checkpoint newer than the latest in both step and time may be a save in progress.
    dir.put("model.ckpt-5.safetensors", b"being written".to_vec())?;
    assert!(manager.collect_garbage()?.deleted.is_empty());
    assert!(dir.exists("model.ckpt-5.safetensors")?);
    Ok(())
}

#[test]
fn keep_every_n_hours_preserves_beyond_the_list() -> Result<()> {
    let dir = ModelDir::open("memory://ckpt-preserve/run")?;
    // Pretend the previous preservation happened two hours ago, so the next pushed-out one qualifies.
    let two_hours_ago = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64() - 7200.0;
    let manager = CheckpointManager::new(dir.clone(), 1, Some(1.0));
    manager.save(1, &variables(1)?, &meta(1))?;
    let mut state = manager.state()?.context("no state")?;
    state.last_preserved_timestamp = Some(two_hours_ago);
    dir.put(STATE_FILE, state.to_text().into_bytes())?;

    manager.save(2, &variables(2)?, &meta(2))?;
    assert_eq!(manager.last_gc_report().preserved, vec!["model.ckpt-1"]);
    manager.save(3, &variables(3)?, &meta(3))?;
    assert_eq!(manager.last_gc_report().deleted, vec!["model.ckpt-2"], "within the hour: not preserved");
    manager.save(4, &variables(4)?, &meta(4))?;
    assert!(dir.exists("model.ckpt-1.safetensors")?);
    assert_eq!(manager.list()?.len(), 1);
    ensure!(CheckpointState::parse(&String::from_utf8(dir.get(STATE_FILE)?)?, "x").is_ok());
    Ok(())
}
