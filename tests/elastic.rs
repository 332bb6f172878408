//! Elastic `multi_worker` with real processes on 127.0.0.1: a job of three workers with
//! `min_workers: 2` loses one to SIGKILL at whatever step it has reached; the two others
//! re-form at the next step, without restarting, and finish with the variables a one_device
//! run reaches on the same global batches (f64). The lost worker may be the chief: the
//! lowest-ranked survivor then takes over its checkpoints. Too few survivors stop with a
//! checkpoint and an error naming who is left.
//!
//! An elastic job reads its input as one pipeline in the one-process order (every worker
//! takes its share of each global batch), and keeps the global batch when workers are
//! lost, so the spec's shuffled input is used as it is.

mod common;

use anyhow::{Context, Result, ensure};
use common::{engine_binary, engine_command, finish, finished, free_ports, latest_step, spec_path, strs};
use engine::estimator::EXAMPLE_LOG_ENV;
use engine::estimator::checkpoint::read_checkpoint;
use engine::graph::HostTensor;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const PER_WORKER: usize = 8;
const WORKERS: usize = 3;
const STEPS: u64 = 60;

fn sets(batch: usize) -> Vec<String> {
    [
        format!("train_input.batch_size={batch}"),
        "run_config.precision=F64".into(),
        "eval_spec.steps=1".into(),
        "eval_spec.start_delay_secs=0".into(),
        "eval_spec.throttle_secs=0".into(),
        "run_config.save_checkpoints_steps=4".into(),
    ]
    .into_iter()
    .flat_map(|s| ["--set".to_string(), s])
    .collect()
}

fn variables(model_dir: &Path, step: u64) -> Result<BTreeMap<String, HostTensor>> {
    let path = model_dir.join(format!("model.ckpt-{step}"));
    Ok(read_checkpoint(&path.to_string_lossy(), None).with_context(|| format!("reading {}", path.display()))?.tensors)
}

fn assert_same_variables(got: &BTreeMap<String, HostTensor>, want: &BTreeMap<String, HostTensor>) -> Result<()> {
    ensure!(got.keys().eq(want.keys()), "variables differ: {:?} vs {:?}", got.keys(), want.keys());
    for (name, w) in want {
        let (x, y) = (got[name].to_f64_vec(), w.to_f64_vec());
        let scale = y.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
        let d = x.iter().zip(&y).fold(0.0f64, |m, (p, q)| m.max((p - q).abs())) / scale;
        ensure!(d <= 1e-5, "{name} differs from one_device's by {d:.2e} (relative)");
    }
    Ok(())
}

/// one_device on the global batch: the variables every elastic run must end with, and
/// the examples of each step (recorded in `ids`).
fn one_device(model_dir: &Path, ids: &Path) -> Result<BTreeMap<String, HostTensor>> {
    let mut args: Vec<String> =
        ["run", &spec_path("fashion_mnist_cnn.ron"), "--strategy", "one_device"].map(String::from).to_vec();
    args.extend(["--max-steps".into(), STEPS.to_string(), "--model-dir".into(), model_dir.display().to_string()]);
    args.extend(sets(PER_WORKER * WORKERS));
    std::fs::create_dir_all(ids)?;
    finished(engine_command(&strs(&args))?.env(EXAMPLE_LOG_ENV, ids).output()?)?.ok()?;
    variables(model_dir, STEPS)
}

/// Each step's examples as a task recorded them (the last record of a step that ran twice).
fn recorded(ids: &Path, task: &str) -> Result<BTreeMap<u64, Vec<u64>>> {
    let path = ids.join(format!("{task}.ids"));
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut steps = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split(' ').map(str::parse::<u64>);
        let step = fields.next().context("an empty line")??;
        steps.insert(step, fields.collect::<Result<Vec<u64>, _>>()?);
    }
    Ok(steps)
}

/// The job trained on one_device's examples step by step, none lost or repeated: before
/// the re-formation at `resumed` every worker's share, after it the survivors'.
fn assert_same_examples(ids: &Path, reference: &Path, victim: usize, resumed: u64) -> Result<()> {
    let want = recorded(reference, "local")?;
    ensure!(want.len() as u64 == STEPS, "one_device recorded {} steps", want.len());
    let tasks: Vec<(usize, BTreeMap<u64, Vec<u64>>)> =
        (0..WORKERS).map(|w| Ok((w, recorded(ids, &format!("worker-{w}"))?))).collect::<Result<_>>()?;
    for (step, examples) in &want {
        let mut got: Vec<u64> = tasks
            .iter()
            .filter(|(w, _)| *step < resumed || *w != victim)
            .filter_map(|(_, steps)| steps.get(step))
            .flatten()
            .copied()
            .collect();
        got.sort_unstable();
        let mut examples = examples.clone();
        examples.sort_unstable();
        ensure!(got == examples, "step {step}: the job trained on {got:?}, one_device on {examples:?}");
    }
    Ok(())
}

/// The step the survivors went on from, from their logs.
fn resumed_at(log: &str) -> Result<u64> {
    let line = log.lines().find(|l| l.contains("Continuing from step ")).context("no re-formation logged")?;
    let step = line.split("Continuing from step ").nth(1).and_then(|r| r.split(' ').next()).context("no step")?;
    Ok(step.parse()?)
}

fn tf_config(ports: &[u16], index: usize) -> String {
    let workers: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    format!(r#"{{"cluster": {{"worker": [{}]}}, "task": {{"type": "worker", "index": {index}}}}}"#, workers.join(", "))
}

/// Worker `index` of an elastic job of three.
fn worker(model_dir: &Path, ids: &Path, ports: &[u16], index: usize, min_workers: usize) -> Result<Child> {
    let mut args: Vec<String> =
        ["run", &spec_path("fashion_mnist_cnn.ron"), "--strategy", "multi_worker"].map(String::from).to_vec();
    args.extend(["--max-steps".into(), STEPS.to_string(), "--model-dir".into(), model_dir.display().to_string()]);
    args.extend(sets(PER_WORKER));
    args.extend(["--set".into(), format!("run_config.min_workers={min_workers}")]);
    // The rendezvous waits for min_workers as long as a connect does: 10 s here.
    args.extend(["--collective-timeout", "15", "--connect-timeout", "10"].map(String::from));
    Ok(engine_command(&strs(&args))?
        .env("TF_CONFIG", tf_config(ports, index))
        .env("ENGINE_CLUSTER_TOKEN", "elastic-test")
        .env(EXAMPLE_LOG_ENV, ids)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?)
}

/// Starts three workers and SIGKILLs worker `victim` once the job has a checkpoint past
/// step 8; returns the other two and the step the kill landed after.
fn start_and_kill(model_dir: &Path, victim: usize, min_workers: usize) -> Result<(Vec<(usize, Child)>, u64)> {
    engine_binary()?;
    let ports = free_ports(WORKERS)?;
    let ids = model_dir.with_extension("ids");
    std::fs::create_dir_all(&ids)?;
    let mut children: Vec<(usize, Child)> =
        (0..WORKERS).map(|i| Ok((i, worker(model_dir, &ids, &ports, i, min_workers)?))).collect::<Result<_>>()?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let at = loop {
        if let Some(step) = latest_step(model_dir).filter(|&s| s >= 8) {
            let (_, child) = children.iter_mut().find(|(i, _)| *i == victim).context("no such worker")?;
            child.kill()?; // SIGKILL
            child.wait()?;
            break step;
        }
        for (i, child) in &mut children {
            ensure!(child.try_wait()?.is_none(), "worker:{i} ended before the kill");
        }
        ensure!(Instant::now() < deadline, "no checkpoint past step 8 in time");
        std::thread::sleep(Duration::from_millis(2));
    };
    ensure!(at < STEPS, "the job finished before the kill landed");
    children.retain(|(i, _)| *i != victim);
    Ok((children, at))
}

/// Waits for the survivors; all must succeed, each having re-formed with two workers at
/// the same step, which it returns.
fn survivors_finish(children: Vec<(usize, Child)>) -> Result<u64> {
    let mut steps = Vec::new();
    for (i, child) in children {
        let (ok, log) = finish(child, Duration::from_secs(300))?;
        ensure!(ok, "worker:{i} failed after the kill:\n{log}");
        ensure!(log.contains("with 2 worker(s)"), "worker:{i} did not re-form with two workers:\n{log}");
        steps.push(resumed_at(&log)?);
    }
    ensure!(steps.windows(2).all(|w| w[0] == w[1]), "the survivors went on from different steps: {steps:?}");
    steps.first().copied().context("no survivor")
}

#[test]
fn a_killed_worker_leaves_the_others_training_like_one_device() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let reference = tmp.path().join("one_device.ids");
    let want = one_device(&tmp.path().join("one_device"), &reference)?;
    let dir = tmp.path().join("elastic");
    let (survivors, killed_after) = start_and_kill(&dir, 2, 2)?;
    let resumed = survivors_finish(survivors)?;
    let what = || format!("worker:2 killed after step {killed_after}, the others went on from {resumed}");
    assert_same_examples(&dir.with_extension("ids"), &reference, 2, resumed).with_context(what)?;
    assert_same_variables(&variables(&dir, STEPS)?, &want).with_context(what)
}

#[test]
fn when_the_chief_is_killed_the_next_worker_takes_over_its_checkpoints() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let reference = tmp.path().join("one_device.ids");
    let want = one_device(&tmp.path().join("one_device"), &reference)?;
    let dir = tmp.path().join("elastic");
    let (survivors, killed_after) = start_and_kill(&dir, 0, 2)?;
    let resumed = survivors_finish(survivors)?;
    ensure!(latest_step(&dir) == Some(STEPS), "no final checkpoint from the new chief: {:?}", latest_step(&dir));
    let what = || format!("worker:0 (the chief) killed after step {killed_after}, the others went on from {resumed}");
    assert_same_examples(&dir.with_extension("ids"), &reference, 0, resumed).with_context(what)?;
    assert_same_variables(&variables(&dir, STEPS)?, &want).with_context(what)
}

#[test]
fn below_min_workers_the_job_stops_with_a_checkpoint_naming_who_is_left() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("elastic");
    let (survivors, _) = start_and_kill(&dir, 2, 3)?;
    for (i, child) in survivors {
        let (ok, log) = finish(child, Duration::from_secs(300))?;
        ensure!(!ok, "worker:{i} trained on below min_workers:\n{log}");
        ensure!(log.contains("within 10s"), "worker:{i} did not wait the connect timeout:\n{log}");
        ensure!(log.contains("fewer than min_workers = 3"), "worker:{i}'s error does not say why:\n{log}");
        ensure!(log.contains("(worker:0, worker:1)"), "worker:{i}'s error does not name the survivors:\n{log}");
    }
    // The chief saved the last step it completed before stopping.
    let saved = latest_step(&dir).context("no checkpoint")?;
    ensure!(saved >= 8, "the last checkpoint is at step {saved}");
    Ok(())
}
