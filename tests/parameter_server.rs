//! `parameter_server` with real processes on 127.0.0.1: `engine launch --ps 1 --workers 2`
//! trains the CNN to one_device's test accuracy at the same number of applied updates; a
//! worker that dies (SIGKILL, or an injected crash under `engine launch`) stops nobody and
//! rejoins when started again; partitioned variables start and are checkpointed as whole
//! ones; a terminated ps task stops the cluster after the chief saved its values; a killed
//! ps task makes every training task fail naming it, and the restarted cluster resumes from
//! the chief's checkpoint; a killed chief makes the workers stop naming it, and restarted
//! they go on from the ps tasks' values; other jobs, wrong tokens and multi_worker with ps
//! tasks are refused.

mod common;

use anyhow::{Context, Result, ensure};
use common::{engine, engine_binary, engine_command, finish, free_ports, latest_step, printed_dict, spec_path};
use engine::estimator::hooks::FAULT_ENV;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A cluster of a chief, one worker and one ps task on `ports`, as `task` (`chief`, 0).
fn tf_config(ports: &[u16], task: &str, index: usize) -> String {
    format!(
        r#"{{"cluster": {{"chief": ["127.0.0.1:{}"], "worker": ["127.0.0.1:{}"], "ps": ["127.0.0.1:{}"]}},
            "task": {{"type": "{task}", "index": {index}}}}}"#,
        ports[0], ports[1], ports[2]
    )
}

/// One `engine run` task of a hand-made cluster, on the CNN spec (plain SGD: the MLP's
/// momentum 0.9 at learning rate 0.1 diverges with stale gradients, and the NaN guard
/// stops it).
fn task(
    model_dir: &Path,
    tf_config: &str,
    token: &str,
    steps: u64,
    connect_timeout: u64,
    extra: &[&str],
) -> Result<Child> {
    let spec = spec_path("fashion_mnist_cnn.ron");
    let connect_timeout = connect_timeout.to_string();
    let dir = model_dir.to_string_lossy().into_owned();
    let steps = steps.to_string();
    let mut args = vec![
        "run",
        &spec,
        "--strategy",
        "parameter_server",
        "--max-steps",
        &steps,
        "--model-dir",
        &dir,
        "--set",
        "run_config.save_checkpoints_steps=50",
        "--set",
        "eval_spec.steps=1",
        "--collective-timeout",
        "10",
        "--connect-timeout",
        &connect_timeout,
    ];
    args.extend_from_slice(extra);
    Ok(engine_command(&args)?
        .env("TF_CONFIG", tf_config)
        .env("ENGINE_CLUSTER_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?)
}

/// A ps task, a chief and a worker on `ports`, training to `steps` in `dir`; the ps task
/// waits `ps_connect_timeout` seconds for a lost chief.
fn start_cluster(dir: &Path, ports: &[u16], steps: u64, ps_connect_timeout: u64) -> Result<(Child, Child, Child)> {
    Ok((
        task(dir, &tf_config(ports, "ps", 0), "t", steps, ps_connect_timeout, &[])?,
        task(dir, &tf_config(ports, "chief", 0), "t", steps, 20, &[])?,
        task(dir, &tf_config(ports, "worker", 0), "t", steps, 20, &[])?,
    ))
}

/// Waits until the model dir has a checkpoint at or past `step`.
fn wait_for_checkpoint(dir: &Path, step: u64, within: Duration) -> Result<u64> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = latest_step(dir).filter(|s| *s >= step) {
            return Ok(s);
        }
        ensure!(Instant::now() < deadline, "no checkpoint at step {step} within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn one_ps_and_two_workers_train_the_cnn_to_one_devices_accuracy() -> Result<()> {
    // The spec's three epochs: by then accuracy has settled, and the run-to-run spread of
    // asynchronous training (which update reads which values depends on timing) is small.
    const STEPS: &str = "2814";
    let tmp = tempfile::tempdir()?;
    let spec = spec_path("fashion_mnist_cnn.ron");
    let single = tmp.path().join("single").to_string_lossy().into_owned();
    let out =
        engine(&["run", &spec, "--strategy", "one_device", "--max-steps", STEPS, "--model-dir", &single])?.ok()?;
    let want = printed_dict(&out.stdout)?;
    let cluster = tmp.path().join("ps").to_string_lossy().into_owned();
    let out = engine(&["launch", &spec, "--ps", "1", "--workers", "2", "--max-steps", STEPS, "--model-dir", &cluster])?
        .ok()?;
    // The chief evaluates the final checkpoint; its dict is the `[worker:0]` line.
    let chief_line =
        out.stdout.lines().find(|l| l.starts_with("[worker:0] {")).context("the chief printed no result")?;
    let got = printed_dict(chief_line.trim_start_matches("[worker:0] "))?;
    ensure!(got["global_step"] >= 2814.0, "{got:?}");
    let (a, b) = (got["accuracy"], want["accuracy"]);
    // Asynchronous updates are not bit-equal to one_device's. Measured at 1200 updates:
    // 0.838 and 0.815 (two runs) against 0.841; see the closing note for 2814.
    ensure!((a - b).abs() <= 0.02, "parameter_server reached accuracy {a}, one_device {b}");
    ensure!(out.stderr.contains("[ps:0]") && out.stderr.contains("serving ended"), "{}", out.stderr);
    // Both workers trained: each pushed updates and logged its final loss.
    for w in ["[worker:0]", "[worker:1]"] {
        ensure!(out.stderr.lines().any(|l| l.starts_with(w) && l.contains("Loss for final step")), "{w} did not train");
    }
    Ok(())
}

#[test]
fn partitioned_variables_start_like_whole_ones_and_are_checkpointed_whole() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = spec_path("fashion_mnist_cnn.ron");
    let whole = tmp.path().join("whole");
    engine(&["run", &spec, "--strategy", "one_device", "--max-steps", "1", "--model-dir", &whole.to_string_lossy()])?
        .ok()?;
    let parted = tmp.path().join("parted");
    let out = engine(&[
        "launch",
        &spec,
        "--ps",
        "2",
        "--workers",
        "2",
        "--max-steps",
        "200",
        "--model-dir",
        &parted.to_string_lossy(),
        "--set",
        "run_config.variable_partitioner=Some(FixedShards(2))",
    ])?
    .ok()?;
    ensure!(out.stderr.contains("[ps:1]"), "{}", out.stderr);
    let read = |dir: &Path, step: u64| -> Result<std::collections::BTreeMap<String, engine::graph::HostTensor>> {
        let path = dir.join(format!("model.ckpt-{step}"));
        Ok(engine::estimator::checkpoint::read_checkpoint(&path.to_string_lossy(), None)?.tensors)
    };
    // The shards start as slices of the whole variable's initial value: the chief's first
    // checkpoint equals one_device's, bit for bit.
    let (a, b) = (read(&whole, 0)?, read(&parted, 0)?);
    ensure!(a.keys().eq(b.keys()), "{:?} vs {:?}", a.keys(), b.keys());
    for (name, t) in &a {
        ensure!(b[name] == *t, "{name} starts differently when partitioned");
    }
    // Checkpoints hold the whole variable, which one_device evaluates as is.
    let last = latest_step(&parted).context("no checkpoint")?;
    let trained = read(&parted, last)?;
    ensure!(
        trained["dense/kernel"].shape == vec![5408, 64] && !trained.keys().any(|k| k.contains("part_")),
        "{:?}",
        trained.keys()
    );
    let out = engine(&["eval", &spec, "--model-dir", &parted.to_string_lossy()])?.ok()?;
    ensure!(printed_dict(&out.stdout)?["accuracy"] > 0.6, "{}", out.stdout);
    Ok(())
}

#[test]
fn a_failed_worker_stops_nobody_and_rejoins_when_started_again() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = spec_path("fashion_mnist_cnn.ron");
    for restarts in ["1", "0"] {
        let dir = tmp.path().join(format!("r{restarts}")).to_string_lossy().into_owned();
        let args = [
            "launch",
            &spec,
            "--ps",
            "1",
            "--workers",
            "3",
            "--max-steps",
            "500",
            "--model-dir",
            &dir,
            "--restart-on-failure",
            restarts,
        ];
        let out = common::finished(engine_command(&args)?.env(FAULT_ENV, "worker:2@40").output()?)?;
        // Restarted, worker:2 rejoins and the job succeeds. Left out, the others finish, but
        // the launcher's status is the failed worker's: its share of the steps is missing.
        let want = if restarts == "1" { 0 } else { 86 };
        ensure!(out.code == Some(want), "restarts={restarts}: exit {:?}, want {want}:\n{}", out.code, out.stderr);
        if restarts == "0" {
            ensure!(
                out.stderr.contains("the others finished without worker:2 (exit code 86), which failed"),
                "{}",
                out.stderr
            );
        }
        ensure!(out.stderr.contains("worker:2 failed (exit code 86)"), "{}", out.stderr);
        ensure!(out.stderr.contains("the others go on"), "{}", out.stderr);
        ensure!(latest_step(Path::new(&dir)).is_some_and(|s| s >= 500), "the chief did not finish");
        let chief_starts =
            out.stderr.lines().filter(|l| l.starts_with("[worker:0]") && l.contains("connected to 1 ps")).count();
        ensure!(chief_starts == 1, "the chief was started {chief_starts} times");
        let rejoined =
            out.stderr.lines().filter(|l| l.starts_with("[worker:2]") && l.contains("connected to 1 ps")).count();
        if restarts == "1" {
            ensure!(rejoined == 2, "worker:2 connected {rejoined} times:\n{}", out.stderr);
            ensure!(out.stderr.contains("starting it again"), "{}", out.stderr);
        } else {
            ensure!(rejoined == 1 && out.stderr.contains("without it"), "{}", out.stderr);
        }
    }
    Ok(())
}

#[test]
fn a_worker_killed_with_sigkill_stops_nobody_and_rejoins() -> Result<()> {
    const STEPS: u64 = 1500;
    let tmp = tempfile::tempdir()?;
    engine_binary()?;
    let dir = tmp.path().join("m");
    let ports = free_ports(3)?;
    let (ps, chief, mut worker) = start_cluster(&dir, &ports, STEPS, 20)?;
    wait_for_checkpoint(&dir, 100, Duration::from_secs(120))?;
    worker.kill()?; // SIGKILL
    worker.wait()?;
    let worker = task(&dir, &tf_config(&ports, "worker", 0), "t", STEPS, 20, &[])?;
    let (ok, log) = finish(chief, Duration::from_secs(180))?;
    ensure!(ok, "the chief stopped when the worker was killed:\n{log}");
    let (ok, log) = finish(worker, Duration::from_secs(60))?;
    ensure!(ok && log.contains("Loss for final step"), "the worker did not rejoin and train:\n{log}");
    let (ok, log) = finish(ps, Duration::from_secs(60))?;
    ensure!(ok, "{log}");
    ensure!(latest_step(&dir).is_some_and(|s| s >= STEPS), "the job did not finish");
    Ok(())
}

#[test]
fn a_killed_ps_task_fails_every_task_by_name_and_the_restarted_cluster_resumes() -> Result<()> {
    const STEPS: u64 = 1500;
    let tmp = tempfile::tempdir()?;
    engine_binary()?;
    let dir = tmp.path().join("m");
    let ports = free_ports(3)?;
    let (mut ps, chief, worker) = start_cluster(&dir, &ports, STEPS, 20)?;
    let saved = wait_for_checkpoint(&dir, 100, Duration::from_secs(120))?;
    let killed = Instant::now();
    ps.kill()?; // SIGKILL
    ps.wait()?;
    for (name, child) in [("chief", chief), ("worker", worker)] {
        let (ok, log) = finish(child, Duration::from_secs(60))?;
        ensure!(!ok, "the {name} trained on without its ps task");
        ensure!(log.contains("ps:0") && log.contains("unreachable"), "the {name} did not name ps:0:\n{log}");
    }
    ensure!(killed.elapsed() < Duration::from_secs(30), "the tasks took {:?} to fail", killed.elapsed());
    ensure!(latest_step(&dir).is_some_and(|s| s >= saved && s < STEPS), "the job finished despite the failure");

    // Started again, the chief initializes the new ps task from its latest checkpoint.
    let ports = free_ports(3)?;
    let (ps, chief, worker) = start_cluster(&dir, &ports, STEPS, 20)?;
    let (ok, log) = finish(chief, Duration::from_secs(180))?;
    ensure!(ok && log.contains("Restoring parameters from model.ckpt-"), "{log}");
    for (name, child) in [("worker", worker), ("ps", ps)] {
        let (ok, log) = finish(child, Duration::from_secs(60))?;
        ensure!(ok, "the {name} failed after the restart:\n{log}");
    }
    ensure!(latest_step(&dir).is_some_and(|s| s >= STEPS), "the restarted job did not finish");
    Ok(())
}

#[test]
fn a_terminated_ps_task_stops_the_cluster_after_the_chief_saved_its_work() -> Result<()> {
    const STEPS: u64 = 1500;
    let tmp = tempfile::tempdir()?;
    engine_binary()?;
    let dir = tmp.path().join("m");
    let ports = free_ports(3)?;
    let (ps, chief, worker) = start_cluster(&dir, &ports, STEPS, 20)?;
    let before = wait_for_checkpoint(&dir, 100, Duration::from_secs(120))?;
    let status = std::process::Command::new("kill").args(["-TERM", &ps.id().to_string()]).status()?;
    ensure!(status.success(), "kill -TERM failed");
    for (name, child) in [("ps", ps), ("chief", chief), ("worker", worker)] {
        let (ok, log) = finish(child, Duration::from_secs(60))?;
        ensure!(!ok, "the {name} went on after the ps task was terminated:\n{log}");
        if name != "ps" {
            ensure!(log.contains("a ps task was asked to stop"), "the {name} did not say why it stopped:\n{log}");
        }
    }
    // The chief saved the last update it saw, past the checkpoint before the signal.
    let saved = latest_step(&dir).context("no checkpoint")?;
    ensure!(saved > before && saved < STEPS, "the last checkpoint is at {saved} (before the signal: {before})");
    Ok(())
}

#[test]
fn a_killed_chief_stops_the_workers_by_name_and_restarted_they_go_on() -> Result<()> {
    const STEPS: u64 = 1500;
    let tmp = tempfile::tempdir()?;
    engine_binary()?;
    let dir = tmp.path().join("m");
    let ports = free_ports(3)?;
    let (ps, mut chief, worker) = start_cluster(&dir, &ports, STEPS, 60)?;
    wait_for_checkpoint(&dir, 100, Duration::from_secs(120))?;
    chief.kill()?;
    chief.wait()?;
    let (ok, log) = finish(worker, Duration::from_secs(60))?;
    ensure!(!ok && log.contains("chief:0 was lost"), "the worker did not stop naming the chief:\n{log}");

    // The ps task kept the variables: the restarted chief and worker go on from them.
    let chief = task(&dir, &tf_config(&ports, "chief", 0), "t", STEPS, 20, &[])?;
    let worker = task(&dir, &tf_config(&ports, "worker", 0), "t", STEPS, 20, &[])?;
    let (ok, log) = finish(chief, Duration::from_secs(180))?;
    ensure!(ok && log.contains("already hold the variables"), "{log}");
    for (name, child) in [("worker", worker), ("ps", ps)] {
        let (ok, log) = finish(child, Duration::from_secs(60))?;
        ensure!(ok, "the {name} failed after the restart:\n{log}");
    }
    ensure!(latest_step(&dir).is_some_and(|s| s >= STEPS), "the restarted job did not finish");
    Ok(())
}

#[test]
fn other_jobs_wrong_tokens_and_multi_worker_with_ps_tasks_are_refused() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    engine_binary()?;
    // A different learning rate: a different graph, refused by fingerprint, both named.
    let dir = tmp.path().join("f");
    let ports = free_ports(3)?;
    let ps = task(&dir, &tf_config(&ports, "ps", 0), "t", 50, 8, &[])?;
    let chief = task(&dir, &tf_config(&ports, "chief", 0), "t", 50, 20, &["--set", "optimizer.learning_rate=0.01"])?;
    let (ok, log) = finish(chief, Duration::from_secs(120))?;
    ensure!(!ok && log.contains("runs job"), "{log}");
    ensure!(log.contains("chief:0") && log.contains("ps:0"), "{log}");
    let (ok, log) = finish(ps, Duration::from_secs(120))?;
    ensure!(!ok && log.contains("no training task reached it"), "{log}");

    // A wrong token: refused as unauthenticated, the token never printed.
    let dir = tmp.path().join("t");
    let ports = free_ports(3)?;
    let ps = task(&dir, &tf_config(&ports, "ps", 0), "right", 50, 8, &[])?;
    let chief = task(&dir, &tf_config(&ports, "chief", 0), "wrong", 50, 20, &[])?;
    let (ok, log) = finish(chief, Duration::from_secs(120))?;
    ensure!(!ok && log.to_lowercase().contains("authentic") && log.contains("ps:0"), "{log}");
    ensure!(!log.contains("right") && !log.contains("wrong"), "a token leaked into an error:\n{log}");
    finish(ps, Duration::from_secs(120))?;

    // multi_worker with ps tasks: refused before anything starts, with the way out.
    let ports = free_ports(3)?;
    let out = engine_command(&["run", &spec_path("fashion_mnist_mlp.ron"), "--strategy", "multi_worker"])?
        .env("TF_CONFIG", tf_config(&ports, "chief", 0))
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success() && err.contains("ps task") && err.contains("parameter_server"), "{err}");
    Ok(())
}
