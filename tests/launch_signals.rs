//! `engine launch` and signals: SIGTERM to the launcher reaches every task, the cluster
//! agrees on one final step, the chief checkpoints it, every task exits, and the launcher
//! exits with 143; the next launch resumes there. A launcher killed outright (SIGKILL)
//! takes its tasks with it: they stop the same way, with the checkpoint, instead of
//! training on alone.

mod common;

use anyhow::{Context, Result, bail, ensure};
use common::{engine_command, latest_step, spec_path};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Stdio};
use std::time::{Duration, Instant};

fn launch(model_dir: &str, max_steps: u64, evaluator: bool) -> Result<Child> {
    let spec = spec_path("fashion_mnist_cnn.ron");
    let max = max_steps.to_string();
    let mut args = vec!["launch", &spec, "--workers", "2", "--model-dir", model_dir, "--max-steps", &max];
    args.extend(["--set", "run_config.log_step_count_steps=10", "--set", "eval_spec.steps=1"]);
    args.extend(["--set", "eval_spec.start_delay_secs=0", "--set", "eval_spec.throttle_secs=0"]);
    if evaluator {
        args.push("--evaluator");
    }
    Ok(engine_command(&args)?.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?)
}

/// Reads the launcher's log until worker 0 has logged a step at or past `after`.
fn wait_for_step(log: &mut BufReader<ChildStderr>, after: u64) -> Result<String> {
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let mut line = String::new();
        if log.read_line(&mut line)? == 0 {
            bail!("the cluster ended before step {after}:\n{seen}");
        }
        seen.push_str(&line);
        let step = line
            .strip_prefix("[worker:0]")
            .and_then(|l| l.split("step = ").nth(1))
            .and_then(|s| s.split([' ', '\n']).next())
            .and_then(|s| s.parse::<u64>().ok());
        if step.is_some_and(|s| s >= after) {
            return Ok(seen);
        }
        ensure!(Instant::now() < deadline, "no step {after} within 180 s:\n{seen}");
    }
}

/// The processes whose parent is `pid` (the launcher's tasks).
fn children_of(pid: u32) -> Result<Vec<libc::pid_t>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Ok(child) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after its `)`.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    Ok(found)
}

fn kill(pid: libc::pid_t, signal: i32) -> Result<()> {
    // SAFETY: kill has no memory effects.
    ensure!(unsafe { libc::kill(pid, signal) } == 0, "kill {pid}: {}", std::io::Error::last_os_error());
    Ok(())
}

/// Every line of a launcher's log is whole: a task's line with its prefix, or the
/// launcher's own (a line cut by another's would start with neither).
fn lines_are_whole(log: &str) -> Result<()> {
    for line in log.lines() {
        let task = line.starts_with("[worker:") || line.starts_with("[chief") || line.starts_with("[evaluator");
        let own = ["I ", "W ", "E ", "error: "].iter().any(|p| line.starts_with(p));
        ensure!(task || own, "a line of the launcher's log is cut or mixed: {line:?}");
    }
    Ok(())
}

/// The step every worker said it stopped at.
fn agreed_stop(log: &str) -> Result<u64> {
    let steps: Vec<u64> = log
        .lines()
        .filter(|l| l.starts_with("[worker:"))
        .filter_map(|l| l.split("Stopping at step ").nth(1))
        .filter_map(|s| s.split(':').next()?.parse().ok())
        .collect();
    ensure!(steps.len() == 2, "expected both workers to stop, found {steps:?}:\n{log}");
    ensure!(steps[0] == steps[1], "the workers stopped at different steps {steps:?}");
    Ok(steps[0])
}

#[test]
fn sigterm_to_the_launcher_stops_the_cluster_at_one_checkpointed_step_and_the_next_launch_resumes() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("run");
    let dir_s = dir.to_string_lossy().into_owned();
    let mut launcher = launch(&dir_s, 5000, false)?;
    let mut log = BufReader::new(launcher.stderr.take().context("no stderr")?);
    let mut seen = wait_for_step(&mut log, 30)?;
    let tasks = children_of(launcher.id())?;
    ensure!(tasks.len() == 2, "expected 2 tasks, found {tasks:?}");
    kill(launcher.id() as libc::pid_t, libc::SIGTERM)?;
    log.read_to_string(&mut seen)?;
    let status = launcher.wait()?;
    ensure!(status.code() == Some(143), "the launcher should exit with 143, got {status}:\n{seen}");
    lines_are_whole(&seen)?;
    let step = agreed_stop(&seen)?;
    ensure!(seen.contains(&format!("Saving checkpoints for {step} ")), "{seen}");
    ensure!(latest_step(&dir) == Some(step), "latest checkpoint {:?}, agreed step {step}", latest_step(&dir));
    for pid in tasks {
        ensure!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "task {pid} outlived the launcher");
    }

    let resume_to = step + 20;
    let mut again = launch(&dir_s, resume_to, false)?;
    let mut log = String::new();
    again.stderr.take().context("no stderr")?.read_to_string(&mut log)?;
    let status = again.wait()?;
    ensure!(status.success(), "the resumed cluster failed ({status}):\n{log}");
    ensure!(log.contains(&format!("Restoring parameters from model.ckpt-{step} ")), "{log}");
    // The same job on new ports is the same job: no fingerprint warning.
    ensure!(!log.contains("written by a graph with fingerprint"), "{log}");
    ensure!(latest_step(&dir) == Some(resume_to));
    lines_are_whole(&log)
}

#[test]
fn an_evaluator_does_not_wait_out_its_start_delay_once_the_final_checkpoint_exists() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("run");
    let spec = spec_path("fashion_mnist_cnn.ron");
    let dir_s = dir.to_string_lossy().into_owned();
    let args = ["launch", &spec, "--workers", "1", "--evaluator", "--model-dir", &dir_s, "--max-steps", "10"];
    let started = Instant::now();
    let out = engine_command(&args)?
        .args(["--set", "eval_spec.steps=1", "--set", "eval_spec.start_delay_secs=600"])
        .output()?;
    let log = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{log}");
    ensure!(started.elapsed() < Duration::from_secs(300), "the evaluator waited out its start delay");
    ensure!(log.contains("the final checkpoint exists"), "{log}");
    Ok(())
}

#[test]
fn a_launcher_killed_outright_takes_its_tasks_with_it_and_they_still_checkpoint() -> Result<()> {
    // Orphans come to this process instead of init, so their exits can be waited for.
    // SAFETY: prctl with these arguments only changes this process's attributes.
    ensure!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0);
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("run");
    let mut launcher = launch(&dir.to_string_lossy(), 5000, true)?;
    let mut log = BufReader::new(launcher.stderr.take().context("no stderr")?);
    wait_for_step(&mut log, 30)?;
    let tasks = children_of(launcher.id())?;
    ensure!(tasks.len() == 3, "expected 2 workers and an evaluator, found {tasks:?}");
    launcher.kill()?; // SIGKILL: the launcher cannot forward anything
    launcher.wait()?;
    drop(log);
    let deadline = Instant::now() + Duration::from_secs(60);
    for pid in tasks {
        let mut status = 0;
        loop {
            // SAFETY: waitpid writes the status into `status`.
            let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if reaped == pid {
                break;
            }
            ensure!(Instant::now() < deadline, "task {pid} still runs 60 s after its launcher died");
            std::thread::sleep(Duration::from_millis(50));
        }
        ensure!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 143,
            "task {pid} should stop as on SIGTERM (status 143), got raw status {status:#x}"
        );
    }
    let step = latest_step(&dir).unwrap_or(0);
    ensure!(step >= 30, "the tasks stopped without the final checkpoint (latest step {step})");
    Ok(())
}
