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

/// A second `engine run` on a model dir that another one is training is refused at once,
/// naming the holder; once that one is killed, the next run takes the lease over.
#[test]
fn a_second_writer_is_refused_naming_the_first() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("run").to_string_lossy().into_owned();
    let mut first = common::engine_command(&strs(&run_args(&dir, 100_000, &[])))?
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let lock = Path::new(&dir).join("writer.lock");
    let started = std::time::Instant::now();
    while !lock.exists() && started.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let second = engine(&strs(&run_args(&dir, 10, &[])));
    let _ = first.kill();
    let _ = first.wait();
    let second = second?;
    ensure!(lock.exists() || second.code != Some(0), "the first run never took the lease");
    ensure!(second.code == Some(1), "the second writer was not refused: {:?}\n{}", second.code, second.stderr);
    let pid = first.id().to_string();
    ensure!(
        second.stderr.contains("is being trained by ") && second.stderr.contains(&format!("(pid {pid} on ")),
        "{}",
        second.stderr
    );
    // The killed holder's lease does not block the restart.
    let third = engine(&strs(&run_args(&dir, 2, &[])))?;
    ensure!(third.code == Some(0), "{}", third.stderr);
    ensure!(third.stderr.contains("which is gone: taking it over"), "{}", third.stderr);
    ensure!(!lock.exists(), "the lease outlived the run");
    Ok(())
}

/// The state file is a hint: one that names a checkpoint that is gone (or a path outside
/// the dir), beside good ones, or that lags behind a newer checkpoint (a crash between
/// writing the data and publishing), leaves `run` and `eval` on the newest that loads.
#[test]
fn a_state_file_naming_the_wrong_checkpoint_does_not_strand_the_run() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("run");
    let dir_s = dir.to_string_lossy().into_owned();
    engine(&strs(&run_args(&dir_s, 100, &["--set", SAVES])))?.ok()?;
    let state = dir.join("checkpoint");
    // Names a missing checkpoint and a path outside the dir; lists nothing that exists.
    std::fs::write(
        &state,
        "model_checkpoint_path: \"model.ckpt-999\"\nall_model_checkpoint_paths: \"/elsewhere/model.ckpt-5\"\n\
         all_model_checkpoint_paths: \"model.ckpt-999\"\n",
    )?;
    let eval = engine(&[
        "eval",
        &common::spec_path("fashion_mnist_cnn.ron"),
        "--model-dir",
        &dir_s,
        "--set",
        "eval_spec.steps=1",
    ])?;
    ensure!(eval.code == Some(0), "eval: {}", eval.stderr);
    let run = engine(&strs(&run_args(&dir_s, 120, &["--set", SAVES])))?;
    ensure!(run.code == Some(0), "run: {}", run.stderr);
    ensure!(run.stderr.contains("names model.ckpt-999 as the latest, but model.ckpt-100"), "{}", run.stderr);
    ensure!(latest_step(&dir) == Some(120), "resumed from {:?}", latest_step(&dir));
    // A state file one save behind the newest data: the newest is resumed, with a word.
    let text = std::fs::read_to_string(&state)?;
    std::fs::write(
        &state,
        text.replace("model_checkpoint_path: \"model.ckpt-120\"", "model_checkpoint_path: \"model.ckpt-100\""),
    )?;
    let run = engine(&strs(&run_args(&dir_s, 140, &["--set", SAVES])))?;
    ensure!(run.code == Some(0), "run: {}", run.stderr);
    ensure!(
        run.stderr.contains("Restoring parameters from") && run.stderr.contains("model.ckpt-120"),
        "{}",
        run.stderr
    );
    Ok(())
}
