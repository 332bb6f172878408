//! Every spec of `specs/` trained by the `engine` binary on each device of
//! `ENGINE_TEST_DEVICES` (CI names `wgpu:0`, lavapipe) replays its steady-state step as one
//! captured graph, and logs the same loss at every step as a run whose steps all go op by
//! op (`ENGINE_STEP_GRAPH=off`): feeds, dropout masks (attention's included), updates and
//! the flag's read all carried into the replays. Processes, not threads: the switch is an
//! environment variable, read when an executor is built.

mod common;

use anyhow::{Context, Result, ensure};
use std::process::Command;

const STEPS: usize = 6;

/// `engine run` of `spec` on `device` for a few steps, started (not waited for).
fn start(spec: &str, device: &str, graph: bool, dir: &std::path::Path) -> Result<std::process::Child> {
    // From the repository's root, where specs name their data (the PNG spec's folders).
    Ok(Command::new(env!("CARGO_BIN_EXE_engine"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["run", &common::spec_path(&format!("fashion_mnist_{spec}.ron")), "--device", device])
        .args(["--max-steps", &STEPS.to_string(), "--model-dir"])
        .arg(dir)
        .args(["--set", "eval_input=None", "--set", "run_config.log_step_count_steps=1"])
        .args(["--set", "train_input.batch_size=4", "--set", "run_config.save_checkpoints_steps=1000"])
        .env("ENGINE_STEP_GRAPH", if graph { "on" } else { "off" })
        // The fixed rule, not each process's measurements: two processes may measure two
        // convolution forms as fastest, which round their sums differently.
        .env("ENGINE_CONV_KERNELS", "rules")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?)
}

/// The loss a run logged at each step, and its log.
fn losses(run: std::process::Child, what: &str) -> Result<(Vec<String>, String)> {
    let out = run.wait_with_output()?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(out.status.success(), "{what}: {log}");
    let losses = log
        .lines()
        .filter_map(|l| l.split("] loss = ").nth(1))
        .map(|rest| rest.split(" (").next().unwrap_or(rest).to_string())
        .collect();
    Ok((losses, log))
}

#[test]
fn every_spec_replays_its_step_as_it_runs_op_by_op() -> Result<()> {
    let devices = std::env::var("ENGINE_TEST_DEVICES").unwrap_or_default();
    for device in devices.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let specs = std::fs::read_dir(common::spec_path(""))?;
        let mut names: Vec<String> = specs
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|f| Some(f.strip_prefix("fashion_mnist_")?.strip_suffix(".ron")?.to_string()))
            .collect();
        names.sort();
        ensure!(names.len() >= 8, "{names:?}");
        for spec in names {
            // Both at once: most of a run is lavapipe compiling its kernels, on one core.
            let (a, b) = (tempfile::tempdir()?, tempfile::tempdir()?);
            let (on, off) = (start(&spec, device, true, a.path())?, start(&spec, device, false, b.path())?);
            let what = format!("{spec} on {device}");
            let (replayed, log) = losses(on, &what)?;
            let (eager, _) = losses(off, &what)?;
            ensure!(log.contains("the step is replayed as one captured graph"), "{spec} on {device}: {log}");
            ensure!(replayed.len() == STEPS, "{spec} on {device}: {replayed:?}");
            // The same kernels on the same device: the same bits, logged alike.
            ensure!(replayed == eager, "{spec} on {device}: {replayed:?} replayed, {eager:?} op by op");
            let last = replayed.last().context("no loss")?;
            ensure!(last.starts_with(|c: char| c.is_ascii_digit()), "{spec}: {last}");
        }
    }
    Ok(())
}
