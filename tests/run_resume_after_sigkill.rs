//! `engine run` killed with SIGKILL in the middle of training, then started again on the same
//! model dir, ends at the same global step with bit-identical weights, optimizer state and
//! input position as a run that was never interrupted (fixed seeds: the spec's
//! `random_seed` and input `seed`).

mod common;

use anyhow::{Context, Result, ensure};
use common::{engine, engine_command, latest_step, run_args, strs};
use engine::estimator::checkpoint::read_checkpoint;
use std::process::Stdio;
use std::time::{Duration, Instant};

const MAX_STEPS: u64 = 300;
const SAVE_EVERY: &str = "run_config.save_checkpoints_steps=20";

#[test]
fn a_run_killed_mid_training_resumes_to_the_same_final_weights() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let unbroken = tmp.path().join("unbroken");
    let killed = tmp.path().join("killed");
    let unbroken_s = unbroken.to_string_lossy().into_owned();
    let killed_s = killed.to_string_lossy().into_owned();

    common::engine_binary()?; // built before the clock starts
    let started = Instant::now();
    engine(&strs(&run_args(&unbroken_s, MAX_STEPS, &["--set", SAVE_EVERY])))?.ok()?;
    let unbroken_secs = started.elapsed().as_secs_f64();

    // The same run, killed once two checkpoints past 0 exist.
    let mut child = engine_command(&strs(&run_args(&killed_s, MAX_STEPS, &["--set", SAVE_EVERY])))?
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let killed_at = loop {
        if let Some(step) = latest_step(&killed).filter(|&s| s >= 40) {
            child.kill()?; // SIGKILL
            child.wait()?;
            break step;
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the run ended ({status}) before it could be killed");
        }
        ensure!(Instant::now() < deadline, "no checkpoint at step 40 within 120 s");
        std::thread::sleep(Duration::from_millis(5));
    };
    let after_kill = latest_step(&killed).context("no checkpoint after the kill")?;
    ensure!(
        after_kill < MAX_STEPS,
        "the run reached step {after_kill} before the kill landed (seen at {killed_at}); the test needs it mid-run"
    );

    // Start again: it resumes from the latest checkpoint and finishes.
    let resumed = engine(&strs(&run_args(&killed_s, MAX_STEPS, &["--set", SAVE_EVERY])))?.ok()?;
    ensure!(
        resumed.stderr.contains(&format!("Restoring parameters from model.ckpt-{after_kill}")),
        "{}",
        resumed.stderr
    );
    ensure!(resumed.stdout.contains(&format!("'global_step': {MAX_STEPS}")), "{}", resumed.stdout);

    let name = format!("model.ckpt-{MAX_STEPS}");
    let a = read_checkpoint(&unbroken.join(&name).to_string_lossy(), None)?;
    let b = read_checkpoint(&killed.join(&name).to_string_lossy(), None)?;
    ensure!(a.step == MAX_STEPS && b.step == MAX_STEPS);
    ensure!(a.tensors.keys().eq(b.tensors.keys()), "{:?} vs {:?}", a.tensors.keys(), b.tensors.keys());
    for (name, tensor) in &a.tensors {
        let other = &b.tensors[name];
        ensure!(
            tensor == other,
            "{name} differs after the resume: {:?} vs {:?}",
            &tensor.to_f64_vec()[..4.min(tensor.len())],
            &other.to_f64_vec()[..4.min(other.len())]
        );
    }
    ensure!(a.tensors.contains_key("conv2d/kernel") && a.tensors.contains_key("global_step"));
    // The input pipeline is at the same position too, so training would go on identically.
    ensure!(a.meta.input_state == b.meta.input_state, "{} vs {}", a.meta.input_state, b.meta.input_state);
    eprintln!("killed at step {after_kill}; unbroken run {unbroken_secs:.1} s");
    Ok(())
}
