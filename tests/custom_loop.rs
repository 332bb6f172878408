//! `examples/custom_loop_multi_worker.rs`, the seed's custom training loop, run as real
//! processes: two `multi_worker` tasks on 127.0.0.1 (TF_CONFIG) end with the variables of
//! the same loop under `one_device` on the same global batches; killed with SIGKILL after
//! their first checkpoint and restarted, and stopped with SIGTERM mid-epoch and restarted,
//! they end like the unbroken run; the unchanged loop under `default`, `mirrored`,
//! `central_storage` and `parameter_server` ends like `one_device` too; with checkpoints on
//! S3 (moto) a restarted cluster resumes from the chief's.
//!
//! In f64 and unshuffled, as tests/multi_worker.rs (worker `i` reads examples `i, i + n, ...`,
//! so the workers' batches at a step make one_device's batch of twice the size).

mod common;

use anyhow::{Context, Result, ensure};
use common::{Moto, example_binary, finish, free_ports};
use engine::estimator::checkpoint::{CheckpointManager, read_checkpoint};
use engine::estimator::model_dir::{ModelDir, S3Options};
use engine::graph::HostTensor;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXAMPLE: &str = "custom_loop_multi_worker";
const EPOCHS: u64 = 3;
const STEPS_PER_EPOCH: u64 = 4;
const GLOBAL_BATCH: usize = 32;
const WITHIN: Duration = Duration::from_secs(300);

/// The example's command: `strategy`, checkpoints in `dir`, `per_replica` examples per
/// replica; f64, unshuffled, the first 4096 training images.
fn command(strategy: &str, dir: &str, per_replica: usize, extra: &[&str]) -> Result<Command> {
    let mut c = Command::new(example_binary(EXAMPLE)?);
    c.args(["--strategy", strategy, "--checkpoint-dir", dir]);
    c.args(["--epochs", &EPOCHS.to_string(), "--steps-per-epoch", &STEPS_PER_EPOCH.to_string()]);
    c.args(["--batch-per-replica", &per_replica.to_string(), "--shuffle", "0", "--take", "4096"]);
    c.args(["--precision", "f64", "--seed", "7"]).args(extra);
    c.env_remove("TF_CONFIG").env("RUST_LOG", "info").stdout(Stdio::piped()).stderr(Stdio::piped());
    Ok(c)
}

/// Runs one process to the end; its log.
fn run_alone(strategy: &str, dir: &Path, per_replica: usize, extra: &[&str]) -> Result<String> {
    let (ok, log) = finish(command(strategy, &dir.to_string_lossy(), per_replica, extra)?.spawn()?, WITHIN)?;
    ensure!(ok, "{strategy} failed:\n{log}");
    Ok(log)
}

/// `TF_CONFIG` for task `index` of type `task_type` in `cluster` (a JSON object's body).
fn tf_config(cluster: &str, task_type: &str, index: usize) -> String {
    format!(r#"{{"cluster": {{{cluster}}}, "task": {{"type": "{task_type}", "index": {index}}}}}"#)
}

/// Starts the tasks of a cluster, `(type, count)` in order: every one runs the example.
fn start_cluster(strategy: &str, dir: &Path, tasks: &[(&str, usize)]) -> Result<Vec<Child>> {
    start_cluster_with(strategy, &dir.to_string_lossy(), tasks, &[], &[])
}

/// `start_cluster` with checkpoints at any location, more flags and more environment.
fn start_cluster_with(
    strategy: &str,
    dir: &str,
    tasks: &[(&str, usize)],
    extra: &[&str],
    env: &[(&str, String)],
) -> Result<Vec<Child>> {
    let total: usize = tasks.iter().map(|(_, n)| n).sum();
    let mut ports = free_ports(total)?.into_iter();
    let mut jobs = Vec::new();
    for (task_type, n) in tasks {
        let addresses: Vec<String> = (0..*n).map(|_| format!("\"127.0.0.1:{}\"", ports.next().unwrap_or(0))).collect();
        jobs.push(format!("\"{task_type}\": [{}]", addresses.join(", ")));
    }
    let cluster = jobs.join(", ");
    let per_replica = GLOBAL_BATCH / tasks.iter().find(|(t, _)| *t == "worker").map(|(_, n)| *n).unwrap_or(1);
    let mut children = Vec::new();
    for (task_type, n) in tasks {
        for index in 0..*n {
            let mut c = command(strategy, dir, per_replica, extra)?;
            c.env("TF_CONFIG", tf_config(&cluster, task_type, index)).envs(env.iter().map(|(k, v)| (k, v)));
            children.push(c.spawn()?);
        }
    }
    Ok(children)
}

/// Waits for every task; all must succeed. Their logs, in task order.
fn finish_all(children: Vec<Child>, what: &str) -> Result<Vec<String>> {
    let mut logs = Vec::new();
    let mut failed = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let (ok, log) = finish(child, WITHIN)?;
        if !ok {
            failed.push(format!("task {i}:\n{log}"));
        }
        logs.push(log);
    }
    ensure!(failed.is_empty(), "{what}: {}", failed.join("\n"));
    Ok(logs)
}

/// The newest checkpoint's variables and loop counters, and its global step.
fn final_state(dir: &Path) -> Result<(u64, BTreeMap<String, HostTensor>)> {
    final_state_at(&dir.to_string_lossy(), None)
}

fn final_state_at(location: &str, s3: Option<&S3Options>) -> Result<(u64, BTreeMap<String, HostTensor>)> {
    let checkpoint = read_checkpoint(location, s3).with_context(|| format!("reading {location}"))?;
    Ok((checkpoint.step, checkpoint.tensors))
}

fn assert_same_state(dir: &Path, reference: &Path, what: &str) -> Result<()> {
    assert_same_tensors(final_state(dir)?, final_state(reference)?, what)
}

type State = (u64, BTreeMap<String, HostTensor>);

fn assert_same_tensors(got: State, want: State, what: &str) -> Result<()> {
    assert_close_tensors(got, want, 1e-5, what)
}

fn assert_close_tensors((step, got): State, (want_step, want): State, tolerance: f64, what: &str) -> Result<()> {
    ensure!(step == want_step && step == EPOCHS * STEPS_PER_EPOCH, "{what}: global step {step}, reference {want_step}");
    ensure!(got.keys().eq(want.keys()), "{what}: tensors differ: {:?} vs {:?}", got.keys(), want.keys());
    for (name, w) in &want {
        let (x, y) = (got[name].to_f64_vec(), w.to_f64_vec());
        let scale = y.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
        let d = x.iter().zip(&y).fold(0.0f64, |m, (p, q)| m.max((p - q).abs())) / scale;
        ensure!(d <= tolerance, "{what}: {name} differs from the reference by {d:.2e} (relative)");
    }
    Ok(())
}

/// The `Epoch: e, accuracy: a, train_loss: l.` lines of a log.
fn epoch_lines(log: &str) -> Vec<String> {
    log.lines().filter_map(|l| l.find("Epoch: ").map(|at| l[at..].to_string())).collect()
}

fn latest_step(dir: &Path) -> Result<Option<u64>> {
    Ok(CheckpointManager::new(ModelDir::open(&dir.to_string_lossy())?, 0, None).latest()?.map(|c| c.step))
}

#[test]
fn two_workers_train_like_one_device_and_resume_after_sigkill_and_sigterm() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let reference = tmp.path().join("one_device");
    let reference_log = run_alone("one_device", &reference, GLOBAL_BATCH, &[])?;
    let reference_epochs = epoch_lines(&reference_log);
    ensure!(reference_epochs.len() == EPOCHS as usize, "one_device printed {reference_epochs:?}:\n{reference_log}");

    // Unbroken: every task prints the same reduced loss and accuracy as one_device.
    let unbroken = tmp.path().join("unbroken");
    let logs = finish_all(start_cluster("multi_worker", &unbroken, &[("worker", 2)])?, "two workers")?;
    for (task, log) in logs.iter().enumerate() {
        ensure!(
            epoch_lines(log) == reference_epochs,
            "worker {task} printed {:?}, one_device {reference_epochs:?}",
            epoch_lines(log)
        );
    }
    assert_same_state(&unbroken, &reference, "two workers vs one_device")?;
    ensure!(
        !unbroken.join("workertemp_1").exists() && std::fs::read_dir(&unbroken)?.count() > 0,
        "only the chief writes into the checkpoint directory"
    );

    // SIGKILL both tasks once the first epoch is checkpointed, then restart them.
    let killed = tmp.path().join("killed");
    let mut children = start_cluster("multi_worker", &killed, &[("worker", 2)])?;
    let deadline = Instant::now() + WITHIN;
    while latest_step(&killed)?.is_none() {
        ensure!(Instant::now() < deadline, "no checkpoint within {WITHIN:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    for child in &mut children {
        child.kill()?;
        child.wait()?;
    }
    let at_kill = latest_step(&killed)?.unwrap_or(0);
    ensure!(at_kill < EPOCHS * STEPS_PER_EPOCH, "the kill came after the last checkpoint ({at_kill})");
    let logs = finish_all(start_cluster("multi_worker", &killed, &[("worker", 2)])?, "restart after SIGKILL")?;
    ensure!(logs[0].contains("Restored model.ckpt-"), "the restart did not restore:\n{}", logs[0]);
    assert_same_state(&killed, &unbroken, "killed and restarted vs unbroken")?;

    // SIGTERM to the chief mid-epoch: both tasks stop after the same step, the chief saves
    // it with the input position, and the restart continues there.
    let stopped = tmp.path().join("stopped");
    let children = start_cluster("multi_worker", &stopped, &[("worker", 2)])?;
    let deadline = Instant::now() + WITHIN;
    while latest_step(&stopped)?.is_none() {
        ensure!(Instant::now() < deadline, "no checkpoint within {WITHIN:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill(2) on a child this test started and has not reaped.
    ensure!(unsafe { libc::kill(children[0].id() as i32, libc::SIGTERM) } == 0, "cannot signal the chief");
    let mut stopped_at = Vec::new();
    for child in children {
        let out = child.wait_with_output()?;
        stopped_at.push((out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    // Both stop after the same step, mid-run: the chief saves it, neither fails otherwise.
    for (task, (code, log)) in stopped_at.iter().enumerate() {
        ensure!(*code == Some(128 + libc::SIGTERM), "worker {task} exited with {code:?}:\n{log}");
    }
    let at_stop = latest_step(&stopped)?.unwrap_or(0);
    ensure!(at_stop > STEPS_PER_EPOCH && at_stop < EPOCHS * STEPS_PER_EPOCH, "saved at step {at_stop} when stopped");
    let logs = finish_all(start_cluster("multi_worker", &stopped, &[("worker", 2)])?, "restart after SIGTERM")?;
    ensure!(logs[0].contains(&format!("Restored model.ckpt-{at_stop}")), "the restart did not restore:\n{}", logs[0]);
    assert_same_state(&stopped, &unbroken, "stopped by SIGTERM and restarted vs unbroken")?;
    Ok(())
}

#[test]
fn the_same_loop_runs_under_every_strategy() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let reference = tmp.path().join("one_device");
    run_alone("one_device", &reference, GLOBAL_BATCH, &[])?;
    let two_cpus = ["--devices", "cpu:0,cpu:1"];
    for (strategy, per_replica, extra) in [
        ("default", GLOBAL_BATCH, &[][..]),
        ("mirrored", GLOBAL_BATCH / 2, &two_cpus[..]),
        ("central_storage", GLOBAL_BATCH / 2, &two_cpus[..]),
    ] {
        let dir = tmp.path().join(strategy);
        run_alone(strategy, &dir, per_replica, extra)?;
        assert_same_state(&dir, &reference, &format!("{strategy} vs one_device"))?;
    }
    // One worker and one ps task: asynchronous training with a single worker applies the
    // same updates in the same order as one process.
    let dir = tmp.path().join("parameter_server");
    finish_all(start_cluster("parameter_server", &dir, &[("worker", 1), ("ps", 1)])?, "parameter_server")?;
    // The ps wire carries host tensors, which are f32 even in an f64 run, so every pull and
    // push rounds; Keras' RMSprop divides by the root of the mean square and amplifies that
    // rounding where gradients are near zero (measured: 1.3e-5 relative).
    assert_close_tensors(final_state(&dir)?, final_state(&reference)?, 1e-4, "parameter_server vs one_device")?;
    Ok(())
}

/// Checkpoints in an object store (moto's S3 on 127.0.0.1), the way tasks on different
/// machines share them: the chief writes one epoch, the restarted cluster resumes from it.
#[test]
fn two_workers_checkpoint_to_s3_and_resume_from_it() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let reference = tmp.path().join("one_device");
    run_alone("one_device", &reference, GLOBAL_BATCH, &[])?;
    let moto = Moto::start()?;
    moto.create_bucket("loops")?;
    let location = "s3://loops/ckpt";
    let env = moto.env();
    let first = start_cluster_with("multi_worker", location, &[("worker", 2)], &["--epochs", "1"], &env)?;
    let logs = finish_all(first, "first epoch")?;
    ensure!(logs.iter().all(|l| epoch_lines(l).len() == 1), "{logs:?}");
    let logs = finish_all(start_cluster_with("multi_worker", location, &[("worker", 2)], &[], &env)?, "the rest")?;
    for (task, log) in logs.iter().enumerate() {
        ensure!(
            log.contains(&format!("Restored model.ckpt-{STEPS_PER_EPOCH}")),
            "worker {task} did not resume:\n{log}"
        );
        ensure!(epoch_lines(log).len() == EPOCHS as usize - 1, "worker {task} trained {:?}", epoch_lines(log));
    }
    let s3 = S3Options {
        endpoint: Some(moto.endpoint()),
        region: Some("us-east-1".into()),
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
        allow_http: Some(true),
    };
    assert_same_tensors(final_state_at(location, Some(&s3))?, final_state(&reference)?, "s3 vs one_device")
}
