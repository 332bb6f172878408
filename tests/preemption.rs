//! SIGTERM and SIGINT to `engine run`: the step in flight finishes, a checkpoint of it is
//! written, the process exits with 128 + the signal, and the next run resumes from exactly
//! that step, ending with the weights of a run that was never interrupted. A second signal
//! exits at once.

mod common;

use anyhow::{Context, Result, bail, ensure};
use common::{engine, engine_command, latest_step, run_args, strs};
use engine::estimator::checkpoint::read_checkpoint;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const MAX_STEPS: u64 = 300;
const LOG_EVERY: &str = "run_config.log_step_count_steps=10";

fn signal(child: &Child, signal: i32) -> Result<()> {
    let pid = libc::pid_t::try_from(child.id())?;
    // SAFETY: kill has no memory effects.
    ensure!(unsafe { libc::kill(pid, signal) } == 0, "kill: {}", std::io::Error::last_os_error());
    Ok(())
}

/// Starts a training run and reads its log until it has logged a step at or past `after`;
/// returns the child and what it logged so far.
fn start_and_wait_for_step(
    model_dir: &str,
    after: u64,
) -> Result<(Child, BufReader<std::process::ChildStderr>, String)> {
    let mut child = engine_command(&strs(&run_args(model_dir, MAX_STEPS, &["--set", LOG_EVERY])))?
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut log = BufReader::new(child.stderr.take().context("no stderr")?);
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut line = String::new();
        if log.read_line(&mut line)? == 0 {
            bail!("the run ended before step {after}:\n{seen}");
        }
        seen.push_str(&line);
        let step =
            line.split("step = ").nth(1).and_then(|s| s.split([' ', '\n']).next()).and_then(|s| s.parse::<u64>().ok());
        if step.is_some_and(|s| s >= after) {
            return Ok((child, log, seen));
        }
        ensure!(Instant::now() < deadline, "no step {after} within 120 s:\n{seen}");
    }
}

fn rest_of(mut log: BufReader<std::process::ChildStderr>, mut seen: String) -> Result<String> {
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut log, &mut rest)?;
    seen.push_str(&rest);
    Ok(seen)
}

/// The step `engine run` says it stopped at after a signal.
fn stopped_at(log: &str, name: &str) -> Result<u64> {
    let marker = format!("Received {name}: stopping at step ");
    let tail = log.split(&marker).nth(1).with_context(|| format!("no `{marker}` in:\n{log}"))?;
    Ok(tail.split(';').next().context("no step")?.parse()?)
}

#[test]
fn sigterm_checkpoints_the_step_in_flight_and_the_next_run_resumes_there() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (unbroken, stopped) = (tmp.path().join("unbroken"), tmp.path().join("stopped"));
    let (unbroken_s, stopped_s) = (unbroken.to_string_lossy().into_owned(), stopped.to_string_lossy().into_owned());
    engine(&strs(&run_args(&unbroken_s, MAX_STEPS, &[])))?.ok()?;

    let (mut child, log, seen) = start_and_wait_for_step(&stopped_s, 30)?;
    signal(&child, libc::SIGTERM)?;
    let status = child.wait()?;
    let log = rest_of(log, seen)?;
    ensure!(status.code() == Some(143), "SIGTERM should exit with 143, got {status}:\n{log}");
    let step = stopped_at(&log, "SIGTERM")?;
    ensure!((30..MAX_STEPS).contains(&step), "stopped at {step}");
    ensure!(latest_step(&stopped) == Some(step), "latest checkpoint {:?}, stopped at {step}", latest_step(&stopped));
    ensure!(log.contains(&format!("stopped at global step {step}, which is checkpointed")), "{log}");
    // Preempted, it does not evaluate: the next run does.
    ensure!(!log.contains("Starting evaluation"), "{log}");

    let resumed = engine(&strs(&run_args(&stopped_s, MAX_STEPS, &[])))?.ok()?;
    ensure!(resumed.stderr.contains(&format!("Restoring parameters from model.ckpt-{step} ")), "{}", resumed.stderr);
    let name = format!("model.ckpt-{MAX_STEPS}");
    let a = read_checkpoint(&unbroken.join(&name).to_string_lossy(), None)?;
    let b = read_checkpoint(&stopped.join(&name).to_string_lossy(), None)?;
    ensure!(a.tensors == b.tensors, "the resumed run's weights differ from the unbroken run's");
    ensure!(a.meta.input_state == b.meta.input_state);
    Ok(())
}

#[test]
fn sigint_stops_the_same_way_with_status_130() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("interrupted");
    let (mut child, log, seen) = start_and_wait_for_step(&dir.to_string_lossy(), 10)?;
    signal(&child, libc::SIGINT)?;
    let status = child.wait()?;
    let log = rest_of(log, seen)?;
    ensure!(status.code() == Some(130), "SIGINT should exit with 130, got {status}:\n{log}");
    ensure!(latest_step(&dir) == Some(stopped_at(&log, "SIGINT")?));
    Ok(())
}

#[test]
fn a_second_signal_exits_at_once() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("twice");
    let (mut child, log, seen) = start_and_wait_for_step(&dir.to_string_lossy(), 10)?;
    // Both arrive while it is stopped, so both are handled as it continues, before its
    // training loop can look: the first asks for a stop, the second (whichever of the two
    // a thread takes second) ends the process without waiting for the step or a checkpoint.
    signal(&child, libc::SIGSTOP)?;
    std::thread::sleep(Duration::from_millis(200));
    signal(&child, libc::SIGINT)?;
    signal(&child, libc::SIGTERM)?;
    signal(&child, libc::SIGCONT)?;
    let status = child.wait()?;
    let log = rest_of(log, seen)?;
    ensure!(
        matches!(status.code(), Some(130 | 143)),
        "the second signal should exit with 128 + its number at once, got {status}:\n{log}"
    );
    ensure!(!log.contains("Received SIG"), "the process went on after the second signal:\n{log}");
    ensure!(latest_step(&dir) == Some(0), "no checkpoint is written after the second signal");
    Ok(())
}
