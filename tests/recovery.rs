//! A model dir damaged by a crash, a full disk or a careless hand never strands a run: a
//! garbage or empty state file, a deleted or truncated latest checkpoint, and the staging
//! file of an interrupted save each leave `engine checkpoints` listing what loads and what
//! does not, and `engine run` resuming from the newest checkpoint that loads (ending with
//! the weights of a run that was never damaged). A run whose input pipeline changed (batch
//! size, shuffle buffer, strategy) continues after the examples already read.

mod common;

use anyhow::{Result, ensure};
use common::{engine, latest_step, run_args, strs};
use engine::estimator::checkpoint::read_checkpoint;
use std::path::Path;

const SAVES: &str = "run_config.save_checkpoints_steps=20";

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// A pid that belonged to a process which has exited.
fn dead_pid() -> Result<u32> {
    let mut child = std::process::Command::new("true").spawn()?;
    let pid = child.id();
    child.wait()?;
    Ok(pid)
}

#[test]
fn a_damaged_model_dir_resumes_from_the_newest_checkpoint_that_loads() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let base = tmp.path().join("base");
    let unbroken = tmp.path().join("unbroken");
    engine(&strs(&run_args(&base.to_string_lossy(), 60, &["--set", SAVES])))?.ok()?;
    engine(&strs(&run_args(&unbroken.to_string_lossy(), 80, &["--set", SAVES])))?.ok()?;
    let want = read_checkpoint(&unbroken.join("model.ckpt-80").to_string_lossy(), None)?;

    type Damage = fn(&Path) -> Result<()>;
    let cases: [(&str, Damage, u64, &str); 4] = [
        (
            "garbage state file",
            |d| Ok(std::fs::write(d.join("checkpoint"), "garbage!!\n")?),
            60,
            "the state file is damaged",
        ),
        ("empty state file", |d| Ok(std::fs::write(d.join("checkpoint"), "")?), 60, "the state file is damaged"),
        ("deleted latest", |d| Ok(std::fs::remove_file(d.join("model.ckpt-60.safetensors"))?), 40, "MISSING"),
        (
            "truncated latest",
            |d| {
                let path = d.join("model.ckpt-60.safetensors");
                let bytes = std::fs::read(&path)?;
                Ok(std::fs::write(&path, &bytes[..bytes.len() / 2])?)
            },
            40,
            "DAMAGED",
        ),
    ];
    for (what, damage, resumes_at, listed_as) in cases {
        let dir = tmp.path().join(what.replace(' ', "_"));
        copy_dir(&base, &dir)?;
        damage(&dir)?;
        let debris = dir.join(format!("model.ckpt-80.safetensors#{}000001", dead_pid()?));
        std::fs::write(&debris, b"half a checkpoint")?;
        let dir_s = dir.to_string_lossy().into_owned();

        let listed = engine(&["checkpoints", &dir_s])?.ok()?;
        ensure!(
            listed.stdout.contains(listed_as),
            "{what}: `engine checkpoints` should say {listed_as}:\n{}",
            listed.stdout
        );
        ensure!(listed.stdout.contains("an interrupted save"), "{what}:\n{}", listed.stdout);
        let latest_row =
            listed.stdout.lines().skip(2).find(|l| l.split_whitespace().last() == Some("latest")).unwrap_or_default();
        ensure!(
            latest_row.starts_with(&format!("model.ckpt-{resumes_at} ")),
            "{what}: resumable should be {resumes_at}:\n{}",
            listed.stdout
        );

        let run = engine(&strs(&run_args(&dir_s, 80, &["--set", SAVES])))?.ok()?;
        ensure!(run.stderr.contains("Damage in the model dir"), "{what}: no warning:\n{}", run.stderr);
        ensure!(
            run.stderr.contains(&format!("Restoring parameters from model.ckpt-{resumes_at} ")),
            "{what}:\n{}",
            run.stderr
        );
        ensure!(!debris.exists(), "{what}: the interrupted save's file is still there");
        ensure!(latest_step(&dir) == Some(80), "{what}: the state file was not repaired");
        let got = read_checkpoint(&dir.join("model.ckpt-80").to_string_lossy(), None)?;
        ensure!(got.tensors == want.tensors, "{what}: the resumed run's weights differ from the unbroken run's");
        // Nothing left to warn about afterwards.
        let listed = engine(&["checkpoints", &dir_s])?.ok()?;
        ensure!(!listed.stdout.contains("DAMAGED") && !listed.stdout.contains("MISSING"), "{what}:\n{}", listed.stdout);
    }
    Ok(())
}

#[test]
fn a_changed_input_pipeline_continues_after_the_examples_read() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("run");
    let dir_s = dir.to_string_lossy().into_owned();
    engine(&strs(&run_args(&dir_s, 20, &["--set", "train_input.batch_size=64"])))?.ok()?;
    let smaller = engine(&strs(&run_args(&dir_s, 40, &["--set", "train_input.batch_size=32"])))?.ok()?;
    ensure!(smaller.stderr.contains("continuing after example 1280"), "{}", smaller.stderr);
    let two = engine(&strs(&run_args(
        &dir_s,
        50,
        &["--set", "train_input.batch_size=32", "--strategy", "mirrored", "--devices", "cpu:0,cpu:1"],
    )))?
    .ok()?;
    ensure!(two.stderr.contains("continuing after example 1920"), "{}", two.stderr);
    let saved = read_checkpoint(&dir.join("model.ckpt-50").to_string_lossy(), None)?;
    ensure!(saved.meta.examples_seen == Some(1920 + 10 * 64), "{:?}", saved.meta.examples_seen);
    Ok(())
}
