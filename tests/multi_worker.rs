//! `multi_worker` with real processes on 127.0.0.1: `engine launch` clusters of 2 and 3
//! workers train the CNN spec to the variables (and every task logs the loss) a one_device
//! run reaches on the same global batches; an evaluator task evaluates the chief's
//! checkpoints; a worker killed with SIGKILL makes the others fail naming it, and the
//! restarted cluster ends where an unbroken one does; `engine launch --restart-on-failure`
//! restarts a cluster whose worker failed and ends like one_device, and without restarts
//! fails naming the worker; mismatched specs, wrong tokens and bad clusters are refused.
//! An embedding's row-sparse gradient crosses processes as its looked-up rows, between
//! workers and to a ps task, and training ends like one_device's.
//!
//! Runs compute in f64 (see strategy_equivalence.rs for why) and read the data unshuffled:
//! worker `i` reads examples `i, i + n, ...` (data sharding), so at every step the union of
//! the workers' batches is exactly one_device's batch of `n` times the size.

mod common;

use anyhow::{Context, Result, anyhow, ensure};
use common::{
    assert_same_variables, checkpoint_variables, engine, engine_binary, engine_command, finish, free_ports,
    latest_step, printed_dict, spec_path,
};
use engine::estimator::hooks::{FAULT_ENV, FAULT_EXIT_CODE};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const PER_WORKER: usize = 8;

/// The CNN spec without shuffling, in `dir`.
fn unshuffled_spec(dir: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(spec_path("fashion_mnist_cnn.ron"))?;
    ensure!(text.contains("shuffle_buffer: 10000, seed: 1,"), "the CNN spec changed; update this test");
    let path = dir.join("cnn_unshuffled.ron");
    std::fs::write(&path, text.replace("shuffle_buffer: 10000, seed: 1,", ""))?;
    Ok(path)
}

/// `tests/specs/<name>` without shuffling, in `dir`.
fn unshuffled_test_spec(dir: &Path, name: &str) -> Result<PathBuf> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs").join(name))?;
    ensure!(text.contains("shuffle_buffer: 1000, seed: 1,"), "tests/specs/{name} changed; update this test");
    let spec = dir.join(name);
    std::fs::write(&spec, text.replace("shuffle_buffer: 1000, seed: 1,", ""))?;
    Ok(spec)
}

fn common_sets(batch: usize) -> Vec<String> {
    [
        format!("train_input.batch_size={batch}"),
        "run_config.precision=F64".into(),
        "eval_spec.steps=1".into(),
        "eval_spec.start_delay_secs=0".into(),
        "eval_spec.throttle_secs=0".into(),
    ]
    .into_iter()
    .flat_map(|s| ["--set".to_string(), s])
    .collect()
}

/// Every `Loss for final step: X.` line of a run's log, keyed by the task prefix the
/// launcher adds (`[worker:1]`; empty for a lone process).
fn final_losses(stderr: &str) -> Result<BTreeMap<String, f64>> {
    const MARK: &str = "Loss for final step: ";
    let mut out = BTreeMap::new();
    for line in stderr.lines().filter(|l| l.contains(MARK)) {
        let task = if line.starts_with('[') {
            line.split_once(']').map(|(t, _)| format!("{t}]")).unwrap_or_default()
        } else {
            String::new()
        };
        let value = line.rsplit_once(MARK).map(|(_, v)| v.trim_end_matches('.')).unwrap_or_default();
        out.insert(task, value.parse::<f64>().with_context(|| format!("bad loss in {line}"))?);
    }
    Ok(out)
}

/// Every training task of the cluster logged, as its final loss, the loss of the global
/// batch: one_device's at the same step (f64, so ordering effects stay far below 1e-6).
fn assert_global_final_loss(cluster_stderr: &str, workers: usize, reference: f64, what: &str) -> Result<()> {
    let losses = final_losses(cluster_stderr)?;
    for w in 0..workers {
        let task = format!("[worker:{w}]");
        let loss = *losses.get(&task).with_context(|| format!("{what}: {task} logged no final loss: {losses:?}"))?;
        let d = (loss - reference).abs() / reference.abs().max(1e-12);
        ensure!(d <= 1e-6, "{what}: {task} logged loss {loss}, one_device {reference} ({d:.2e} relative)");
    }
    Ok(())
}

/// `engine run SPEC --strategy S --max-steps N --model-dir D` with the common settings for
/// a per-replica batch of `batch`.
fn run_command(spec: &Path, strategy: &str, model_dir: &Path, steps: u64, batch: usize) -> Vec<String> {
    let mut args = vec![
        "run".to_string(),
        spec.to_string_lossy().into_owned(),
        "--strategy".into(),
        strategy.into(),
        "--max-steps".into(),
        steps.to_string(),
        "--model-dir".into(),
        model_dir.to_string_lossy().into_owned(),
    ];
    args.extend(common_sets(batch));
    args
}

/// Trains with one_device and returns the final step's loss.
fn one_device(spec: &Path, model_dir: &Path, batch: usize, steps: u64) -> Result<f64> {
    let args = run_command(spec, "one_device", model_dir, steps, batch);
    let out = engine(&common::strs(&args))?.ok()?;
    final_losses(&out.stderr)?
        .get("")
        .copied()
        .with_context(|| format!("one_device logged no final loss:\n{}", out.stderr))
}

fn launch_args(spec: &Path, model_dir: &Path, workers: usize, steps: u64, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "launch".to_string(),
        spec.to_string_lossy().into_owned(),
        "--workers".into(),
        workers.to_string(),
        "--max-steps".into(),
        steps.to_string(),
        "--model-dir".into(),
        model_dir.to_string_lossy().into_owned(),
    ];
    args.extend(common_sets(PER_WORKER));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

#[test]
fn two_and_three_workers_train_like_one_device() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = unshuffled_spec(tmp.path())?;
    const STEPS: u64 = 12;
    // All tasks share this host: 2 workers all-reduce through shared memory (`Auto`), 3
    // over the gRPC ring (forced), so both paths are held to one_device's result.
    for (workers, communication, path) in [(2, "Auto", "through shared memory"), (3, "Ring", "over the gRPC ring")] {
        let reference = tmp.path().join(format!("one_device_{workers}"));
        let reference_loss = one_device(&spec, &reference, PER_WORKER * workers, STEPS)?;
        let cluster = tmp.path().join(format!("workers_{workers}"));
        let set = format!("run_config.communication={communication}");
        let out = engine(&common::strs(&launch_args(&spec, &cluster, workers, STEPS, &["--set", &set])))?.ok()?;
        for w in 0..workers {
            let line =
                out.stderr.lines().find(|l| l.starts_with(&format!("[worker:{w}]")) && l.contains("all-reduce "));
            ensure!(line.is_some_and(|l| l.contains(path)), "worker:{w} did not all-reduce {path}: {line:?}");
        }
        // The chief evaluated the final checkpoint; every worker logged its part.
        let chief = out.stdout.lines().find(|l| l.starts_with("[worker:0] {")).context("no result from the chief")?;
        let result = printed_dict(chief.trim_start_matches("[worker:0] "))?;
        ensure!(result.get("global_step") == Some(&(STEPS as f64)), "{result:?}");
        for w in 0..workers {
            ensure!(out.stderr.contains(&format!("[worker:{w}]")), "no log lines from worker:{w}:\n{}", out.stderr);
        }
        assert_same_variables(
            &checkpoint_variables(&cluster, STEPS)?,
            &checkpoint_variables(&reference, STEPS)?,
            &format!("{workers} workers"),
        )?;
        // Each process holds one replica of `workers`, yet each logs the global loss.
        assert_global_final_loss(&out.stderr, workers, reference_loss, &format!("{workers} workers"))?;
        // Only the chief writes: one set of checkpoints, one events file for training.
        let events: Vec<_> = std::fs::read_dir(&cluster)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("events.out.tfevents"))
            .collect();
        ensure!(events.len() == 1, "expected the chief's events file alone, found {}", events.len());
    }
    Ok(())
}

/// Synchronized batch normalization across processes: each worker normalizes with the
/// statistics of the whole global batch (an all-reduce in the forward pass and its
/// gradient's in the backward pass), so two workers end like one_device on that batch,
/// moving statistics included.
#[test]
fn two_workers_with_synchronized_batch_norm_train_like_one_device() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = unshuffled_test_spec(tmp.path(), "sync_batch_norm.ron")?;
    const STEPS: u64 = 8;
    let reference = tmp.path().join("one_device");
    let reference_loss = one_device(&spec, &reference, PER_WORKER * 2, STEPS)?;
    let cluster = tmp.path().join("workers");
    let out = engine(&common::strs(&launch_args(&spec, &cluster, 2, STEPS, &[])))?.ok()?;
    let want = checkpoint_variables(&reference, STEPS)?;
    ensure!(want.contains_key("batch_normalization/moving_mean"), "{:?}", want.keys());
    assert_same_variables(&checkpoint_variables(&cluster, STEPS)?, &want, "2 workers, synchronized batch norm")?;
    assert_global_final_loss(&out.stderr, 2, reference_loss, "2 workers, synchronized batch norm")
}

/// Row-sparse gradients across processes: an embedding trained with momentum, whose
/// gradient the workers exchange as the rows they looked up (and a parameter-server worker
/// sends as such), ends like one_device, untouched rows included.
#[test]
fn embedding_rows_travel_between_processes_and_train_like_one_device() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = unshuffled_test_spec(tmp.path(), "embedding.ron")?;
    const STEPS: u64 = 8;
    let reference = tmp.path().join("one_device");
    let reference_loss = one_device(&spec, &reference, PER_WORKER * 2, STEPS)?;
    let want = checkpoint_variables(&reference, STEPS)?;
    ensure!(want.contains_key("embedding/embeddings/Momentum"), "{:?}", want.keys());
    let cluster = tmp.path().join("workers");
    let out = engine(&common::strs(&launch_args(&spec, &cluster, 2, STEPS, &[])))?.ok()?;
    assert_same_variables(&checkpoint_variables(&cluster, STEPS)?, &want, "2 workers, embedding")?;
    assert_global_final_loss(&out.stderr, 2, reference_loss, "2 workers, embedding")?;
    // One worker and a ps task: the same updates, applied on the ps from the rows sent.
    let reference = tmp.path().join("one_device_single");
    one_device(&spec, &reference, PER_WORKER, STEPS)?;
    let ps = tmp.path().join("ps");
    engine(&common::strs(&launch_args(&spec, &ps, 1, STEPS, &["--ps", "1"])))?.ok()?;
    assert_same_variables(
        &checkpoint_variables(&ps, STEPS)?,
        &checkpoint_variables(&reference, STEPS)?,
        "1 worker and 1 ps, embedding",
    )
}

#[test]
fn the_evaluator_task_evaluates_the_chiefs_checkpoints_until_the_last() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = unshuffled_spec(tmp.path())?;
    let dir = tmp.path().join("with_evaluator");
    let out = engine(&common::strs(&launch_args(
        &spec,
        &dir,
        2,
        20,
        &["--evaluator", "--set", "run_config.save_checkpoints_steps=5"],
    )))?
    .ok()?;
    let line = out.stdout.lines().find(|l| l.starts_with("[evaluator:0] {")).context("no result from the evaluator")?;
    let result = printed_dict(line.trim_start_matches("[evaluator:0] "))?;
    ensure!(result.get("global_step") == Some(&20.0) && result.contains_key("accuracy"), "{result:?}");
    ensure!(dir.join("eval").is_dir(), "the evaluator wrote no eval summaries");
    ensure!(out.stderr.contains("[evaluator:0]") && out.stderr.contains("Starting evaluation"), "{}", out.stderr);
    Ok(())
}

/// One `engine run` task of a hand-made cluster.
fn task(spec: &Path, model_dir: &Path, tf_config: &str, token: &str, steps: u64, extra: &[&str]) -> Result<Child> {
    let mut args = run_command(spec, "multi_worker", model_dir, steps, PER_WORKER);
    args.extend(["--set", "run_config.save_checkpoints_steps=4", "--collective-timeout", "15"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    Ok(engine_command(&common::strs(&args))?
        .env("TF_CONFIG", tf_config)
        .env("ENGINE_CLUSTER_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?)
}

fn tf_config(ports: &[u16], index: usize) -> String {
    let workers: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    format!(r#"{{"cluster": {{"worker": [{}]}}, "task": {{"type": "worker", "index": {index}}}}}"#, workers.join(", "))
}

#[test]
fn a_killed_worker_is_named_and_the_restarted_cluster_ends_like_an_unbroken_one() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = unshuffled_spec(tmp.path())?;
    engine_binary()?;
    const STEPS: u64 = 40;
    // Unbroken.
    let unbroken = tmp.path().join("unbroken");
    let ports = free_ports(2)?;
    let chief = task(&spec, &unbroken, &tf_config(&ports, 0), "t", STEPS, &[])?;
    let worker = task(&spec, &unbroken, &tf_config(&ports, 1), "t", STEPS, &[])?;
    let (ok0, err0) = finish(chief, Duration::from_secs(300))?;
    let (ok1, err1) = finish(worker, Duration::from_secs(300))?;
    ensure!(ok0 && ok1, "unbroken run failed:\n{err0}\n{err1}");

    // Killed: worker 1 dies once the chief has a checkpoint past step 8.
    let broken = tmp.path().join("broken");
    let ports = free_ports(2)?;
    let chief = task(&spec, &broken, &tf_config(&ports, 0), "t", STEPS, &[])?;
    let mut worker = task(&spec, &broken, &tf_config(&ports, 1), "t", STEPS, &[])?;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if latest_step(&broken).is_some_and(|s| s >= 8) {
            worker.kill()?; // SIGKILL
            worker.wait()?;
            break;
        }
        ensure!(worker.try_wait()?.is_none(), "worker:1 ended before it could be killed");
        ensure!(Instant::now() < deadline, "no checkpoint past step 8 in time");
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_at = latest_step(&broken).unwrap_or(0);
    ensure!(killed_at < STEPS, "the cluster finished before the kill landed");
    // The chief fails within the collective timeout (15 s), naming the dead worker.
    let started = Instant::now();
    let (ok, err) = finish(chief, Duration::from_secs(90))?;
    ensure!(!ok, "the chief went on without worker:1:\n{err}");
    ensure!(err.contains("worker:1"), "the chief's error does not name worker:1:\n{err}");
    ensure!(started.elapsed() < Duration::from_secs(60), "the chief took {:?} to notice", started.elapsed());

    // Restarted: both resume from the chief's latest checkpoint and finish.
    let ports = free_ports(2)?;
    let chief = task(&spec, &broken, &tf_config(&ports, 0), "t", STEPS, &[])?;
    let worker = task(&spec, &broken, &tf_config(&ports, 1), "t", STEPS, &[])?;
    let (ok0, err0) = finish(chief, Duration::from_secs(300))?;
    let (ok1, err1) = finish(worker, Duration::from_secs(300))?;
    ensure!(ok0 && ok1, "restarted run failed:\n{err0}\n{err1}");
    ensure!(err0.contains("Restoring parameters from"), "the chief did not resume:\n{err0}");
    assert_same_variables(
        &checkpoint_variables(&broken, STEPS)?,
        &checkpoint_variables(&unbroken, STEPS)?,
        "restarted vs unbroken",
    )
}

/// `engine launch` in the background with its output in files (a pipe left unread could
/// fill and stall it), killed if it runs past `within`.
fn launch_within(args: &[String], env: (&str, &str), logs: &Path, within: Duration) -> Result<(common::Run, Duration)> {
    let (stdout, stderr) = (logs.with_extension("out"), logs.with_extension("err"));
    let started = Instant::now();
    let mut child = engine_command(&common::strs(args))?
        .env(env.0, env.1)
        .stdout(std::fs::File::create(&stdout)?)
        .stderr(std::fs::File::create(&stderr)?)
        .spawn()?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > within {
            child.kill()?;
            child.wait()?;
            return Err(anyhow!(
                "engine launch still running after {within:?}:\n{}",
                std::fs::read_to_string(&stderr)?
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let run = common::Run {
        code: status.code(),
        stdout: std::fs::read_to_string(&stdout)?,
        stderr: std::fs::read_to_string(&stderr)?,
    };
    Ok((run, started.elapsed()))
}

#[test]
fn launch_restarts_a_failed_cluster_which_ends_like_one_device_and_without_restarts_fails() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = unshuffled_spec(tmp.path())?;
    const STEPS: u64 = 12;
    // worker:1 exits after step 6 of the first start; the chief's latest checkpoint is 4.
    let fault = (FAULT_ENV, "worker:1@6");
    let reference = tmp.path().join("one_device");
    let reference_loss = one_device(&spec, &reference, PER_WORKER * 2, STEPS)?;

    let dir = tmp.path().join("restarted");
    let args = launch_args(
        &spec,
        &dir,
        2,
        STEPS,
        &["--restart-on-failure", "1", "--set", "run_config.save_checkpoints_steps=4"],
    );
    let (out, _) = launch_within(&args, fault, &tmp.path().join("restarted_launch"), Duration::from_secs(600))?;
    let out = out.ok()?;
    let failed = format!("worker:1 failed (exit code {FAULT_EXIT_CODE})");
    ensure!(
        out.stderr.contains(&failed) && out.stderr.contains("restarting the cluster (1 of 1)"),
        "no restart reported:\n{}",
        out.stderr
    );
    ensure!(out.stderr.contains("(attempt 2)"), "the launcher did not start a second cluster:\n{}", out.stderr);
    let resumed = out.stderr.lines().any(|l| l.starts_with("[worker:0]") && l.contains("Restoring parameters from"));
    ensure!(resumed, "the chief did not resume from its checkpoint:\n{}", out.stderr);
    ensure!(latest_step(&dir) == Some(STEPS), "the job ended at {:?}, not {STEPS}", latest_step(&dir));
    assert_same_variables(
        &checkpoint_variables(&dir, STEPS)?,
        &checkpoint_variables(&reference, STEPS)?,
        "restarted cluster vs one_device",
    )?;
    assert_global_final_loss(&out.stderr, 2, reference_loss, "restarted cluster")?;

    // No restarts: the same failure ends the launch with an error naming worker:1, and
    // promptly: the launcher stops the other tasks at once rather than leaving them to
    // their collective timeout (300 s).
    let dir = tmp.path().join("not_restarted");
    let args = launch_args(&spec, &dir, 2, STEPS, &["--restart-on-failure", "0"]);
    let (out, took) = launch_within(&args, fault, &tmp.path().join("not_restarted_launch"), Duration::from_secs(300))?;
    // The launcher exits with the failed task's status, as a restart policy would read it.
    ensure!(
        out.code == Some(FAULT_EXIT_CODE),
        "engine launch exited with {:?} after a failure:\n{}",
        out.code,
        out.stderr
    );
    let error = out.stderr.lines().find(|l| l.starts_with("error: ")).context("no error line")?;
    ensure!(error.contains(&failed), "the error does not name the failed task: {error}");
    // A survivor of the lost worker fails with a retryable status, as a restart cures it.
    ensure!(
        !error.contains("worker:0 failed (exit code") || error.contains("worker:0 failed (exit code 200)"),
        "{error}"
    );
    ensure!(!out.stderr.contains("(attempt 2)"), "restarted with --restart-on-failure 0:\n{}", out.stderr);
    ensure!(took < Duration::from_secs(120), "engine launch took {took:?} to give up");
    ensure!(latest_step(&dir).is_none_or(|s| s < STEPS), "the job finished despite the failure");
    Ok(())
}

#[test]
fn mismatched_specs_wrong_tokens_and_bad_clusters_are_refused() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = unshuffled_spec(tmp.path())?;
    engine_binary()?;
    let dir = tmp.path().join("m");
    // A different learning rate: a different graph, refused at the handshake by fingerprint.
    let ports = free_ports(2)?;
    let a = task(&spec, &dir, &tf_config(&ports, 0), "t", 5, &[])?;
    let b = task(&spec, &dir, &tf_config(&ports, 1), "t", 5, &["--set", "optimizer.learning_rate=0.01"])?;
    let (ok_a, err_a) = finish(a, Duration::from_secs(120))?;
    let (ok_b, err_b) = finish(b, Duration::from_secs(120))?;
    ensure!(!ok_a && !ok_b, "mismatched tasks trained together");
    let both = format!("{err_a}\n{err_b}");
    ensure!(both.contains("fingerprint") && both.contains("worker:0") && both.contains("worker:1"), "{both}");

    // A wrong token: refused as unauthenticated.
    let dir = tmp.path().join("t");
    let ports = free_ports(2)?;
    let a = task(&spec, &dir, &tf_config(&ports, 0), "right", 5, &[])?;
    let b = task(&spec, &dir, &tf_config(&ports, 1), "wrong", 5, &[])?;
    let (ok_a, err_a) = finish(a, Duration::from_secs(120))?;
    let (ok_b, err_b) = finish(b, Duration::from_secs(120))?;
    ensure!(!ok_a && !ok_b, "tasks with different tokens trained together");
    let both = format!("{err_a}\n{err_b}");
    ensure!(both.to_lowercase().contains("authentic"), "{both}");
    ensure!(!both.contains("right") && !both.contains("wrong"), "a token leaked into an error:\n{both}");

    // An index out of range and a duplicate address: refused before any connection.
    let ports = free_ports(2)?;
    let out = engine_command(&["run", &spec.to_string_lossy(), "--strategy", "multi_worker"])?
        .env("TF_CONFIG", tf_config(&ports, 2))
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success() && err.contains("worker:2") && err.contains("out of range"), "{err}");
    let dup = format!(
        r#"{{"cluster": {{"worker": ["127.0.0.1:{0}", "127.0.0.1:{0}"]}}, "task": {{"type": "worker", "index": 0}}}}"#,
        ports[0]
    );
    let out = engine_command(&["run", &spec.to_string_lossy(), "--strategy", "multi_worker"])?
        .env("TF_CONFIG", dup)
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success() && err.contains("worker:0") && err.contains("worker:1"), "{err}");
    Ok(())
}

/// torchrun's variables (`MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE`, as torchrun and
/// Kubeflow's PyTorchJob set them): two processes meet at the master, learn each other's
/// addresses, and train like one_device on the global batch.
#[test]
fn torchrun_variables_make_a_cluster_that_trains_like_one_device() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = unshuffled_spec(tmp.path())?;
    const STEPS: u64 = 8;
    let reference = tmp.path().join("one_device");
    let reference_loss = one_device(&spec, &reference, PER_WORKER * 2, STEPS)?;
    let dir = tmp.path().join("torchrun");
    let master_port = free_ports(1)?[0];
    let mut children = Vec::new();
    for rank in 0..2 {
        let args = run_command(&spec, "multi_worker", &dir, STEPS, PER_WORKER);
        let child = engine_command(&common::strs(&args))?
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", master_port.to_string())
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", "2")
            .env("ENGINE_CLUSTER_TOKEN", "torchrun-test")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        children.push(child);
    }
    let mut logs = String::new();
    for child in children {
        let out = child.wait_with_output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "a torchrun task failed:\n{stderr}");
        logs.push_str(&stderr);
    }
    ensure!(logs.contains("torchrun"), "the tasks did not name their cluster source:\n{logs}");
    assert_same_variables(
        &checkpoint_variables(&dir, STEPS)?,
        &checkpoint_variables(&reference, STEPS)?,
        "torchrun cluster",
    )?;
    let losses = final_losses(&logs)?;
    ensure!(!losses.is_empty(), "no final loss logged:\n{logs}");
    for loss in losses.values() {
        ensure!((loss - reference_loss).abs() / reference_loss.abs() <= 1e-6, "{loss} vs {reference_loss}");
    }
    Ok(())
}

/// A cluster started by hand without a shared token says that it runs unauthenticated
/// before it connects (`engine launch` makes a token for the tasks it starts).
#[test]
fn a_cluster_without_a_token_is_warned_about() -> Result<()> {
    let ports = common::free_ports(2)?;
    let cluster = format!("worker=127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    let spec = common::spec_path("fashion_mnist_mlp.ron");
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().to_string_lossy().into_owned();
    let args = [
        "run",
        &spec,
        "--strategy",
        "multi_worker",
        "--cluster",
        &cluster,
        "--task",
        "worker:1",
        "--connect-timeout",
        "1",
        "--max-steps",
        "1",
        "--model-dir",
        &dir,
    ];
    let out = common::finished(common::engine_command(&args)?.env_remove("ENGINE_CLUSTER_TOKEN").output()?)?;
    ensure!(out.code != Some(0), "a cluster missing worker:0 trained: {}", out.stderr);
    ensure!(
        out.stderr.contains("runs unauthenticated") && out.stderr.contains("ENGINE_CLUSTER_TOKEN"),
        "{}",
        out.stderr
    );
    Ok(())
}
