//! Elastic `multi_worker` with real processes on 127.0.0.1: a job of three workers with
//! `min_workers: 2` loses one to SIGKILL at whatever step it has reached; the two others
//! re-form at the next step, without restarting, and finish with the variables a one_device
//! run reaches on the same global batches (f64), having trained on exactly its examples
//! step by step. The lost worker may be the chief (the lowest-ranked survivor then takes
//! over its checkpoints), or die inside an all-reduce (no step is half applied). Started
//! again (by hand or by `engine launch --restart-on-failure`), the killed worker rejoins at
//! the job's next step and the job is three again, as it is when a new machine replaces it
//! at another address. A worker from outside the cluster spec joins a job with room for it
//! (`max_workers` past the cluster, a cluster token). Too few survivors stop with a
//! checkpoint and an error naming who is left.
//!
//! An elastic job reads its input as one pipeline in the one-process order (every worker
//! takes its share of each global batch), and keeps the global batch when workers come and
//! go, so the spec's shuffled input is used as it is.

mod common;

use anyhow::{Context, Result, ensure};
use common::{
    assert_same_variables, checkpoint_variables, engine_binary, engine_command, finish, finished, free_ports,
    latest_step, spec_path, strs,
};
use engine::estimator::EXAMPLE_LOG_ENV;
use engine::graph::HostTensor;
use engine::runtime::FAULT_IN_ALL_REDUCE_ENV;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const PER_WORKER: usize = 8;
const WORKERS: usize = 3;

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

/// one_device on the global batch for `steps`: the variables every elastic run must end
/// with, and the examples of each step (recorded in `ids`).
fn one_device(dir: &Path, steps: u64) -> Result<(BTreeMap<String, HostTensor>, PathBuf)> {
    let (model_dir, ids) = (dir.join("one_device"), dir.join("one_device.ids"));
    let mut args: Vec<String> =
        ["run", &spec_path("fashion_mnist_cnn.ron"), "--strategy", "one_device"].map(String::from).to_vec();
    args.extend(["--max-steps".into(), steps.to_string(), "--model-dir".into(), model_dir.display().to_string()]);
    args.extend(sets(PER_WORKER * WORKERS));
    std::fs::create_dir_all(&ids)?;
    finished(engine_command(&strs(&args))?.env(EXAMPLE_LOG_ENV, &ids).output()?)?.ok()?;
    Ok((checkpoint_variables(&model_dir, steps)?, ids))
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

/// An elastic job of three workers on free ports, each recording its examples.
struct Job {
    dir: PathBuf,
    ids: PathBuf,
    ports: Vec<u16>,
    steps: u64,
    min_workers: usize,
    /// `run_config.max_workers`, when set: the global batch is `per_worker` times it.
    max_workers: Option<usize>,
    per_worker: usize,
}

impl Job {
    fn new(dir: PathBuf, steps: u64, min_workers: usize) -> Result<Job> {
        engine_binary()?;
        let ids = dir.with_extension("ids");
        std::fs::create_dir_all(&ids)?;
        Ok(Job { dir, ids, ports: free_ports(WORKERS)?, steps, min_workers, max_workers: None, per_worker: PER_WORKER })
    }

    /// Worker `index` of a cluster on `ports`.
    fn tf_config(ports: &[u16], index: usize) -> String {
        let workers: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
        format!(
            r#"{{"cluster": {{"worker": [{}]}}, "task": {{"type": "worker", "index": {index}}}}}"#,
            workers.join(", ")
        )
    }

    /// Starts worker `index` (again, for one that was killed).
    fn worker(&self, index: usize) -> Result<Child> {
        self.worker_with(index, &[])
    }

    fn worker_with(&self, index: usize, env: &[(&str, &str)]) -> Result<Child> {
        self.task(Self::tf_config(&self.ports, index), env)
    }

    /// Starts worker `index` on a new machine, outside the job's cluster spec: its own spec
    /// is the job's with its new address (added, or in place of the one it replaces), as an
    /// operator writes a new machine's TF_CONFIG.
    fn elsewhere(&self, index: usize) -> Result<Child> {
        let mut ports = self.ports.clone();
        let port = free_ports(1)?[0];
        match ports.get_mut(index) {
            Some(old) => *old = port,
            None => ports.push(port),
        }
        self.task(Self::tf_config(&ports, index), &[])
    }

    fn task(&self, tf_config: String, env: &[(&str, &str)]) -> Result<Child> {
        let mut args: Vec<String> =
            ["run", &spec_path("fashion_mnist_cnn.ron"), "--strategy", "multi_worker"].map(String::from).to_vec();
        args.extend([
            "--max-steps".into(),
            self.steps.to_string(),
            "--model-dir".into(),
            self.dir.display().to_string(),
        ]);
        args.extend(sets(self.per_worker));
        args.extend(["--set".into(), format!("run_config.min_workers={}", self.min_workers)]);
        if let Some(max) = self.max_workers {
            args.extend(["--set".into(), format!("run_config.max_workers={max}")]);
        }
        // The rendezvous waits for min_workers as long as a connect does: 10 s here.
        args.extend(["--collective-timeout", "15", "--connect-timeout", "10"].map(String::from));
        Ok(engine_command(&strs(&args))?
            .env("TF_CONFIG", tf_config)
            .env("ENGINE_CLUSTER_TOKEN", "elastic-test")
            .env(EXAMPLE_LOG_ENV, &self.ids)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?)
    }

    /// Starts the three workers and returns them once the job has a checkpoint past step 8,
    /// with that step.
    fn start_and_wait(&self) -> Result<(Vec<(usize, Child)>, u64)> {
        let mut children: Vec<(usize, Child)> =
            (0..WORKERS).map(|i| Ok((i, self.worker(i)?))).collect::<Result<_>>()?;
        let deadline = Instant::now() + Duration::from_secs(300);
        let at = loop {
            if let Some(step) = latest_step(&self.dir).filter(|&s| s >= 8) {
                break step;
            }
            for (i, child) in &mut children {
                ensure!(child.try_wait()?.is_none(), "worker:{i} ended before step 8");
            }
            ensure!(Instant::now() < deadline, "no checkpoint past step 8 in time");
            std::thread::sleep(Duration::from_millis(2));
        };
        ensure!(at < self.steps, "the job finished before it was caught running");
        Ok((children, at))
    }

    /// Starts the three workers and SIGKILLs worker `victim` once the job has a checkpoint
    /// past step 8; returns the other two and the step the kill landed after.
    fn start_and_kill(&self, victim: usize) -> Result<(Vec<(usize, Child)>, u64)> {
        let (mut children, at) = self.start_and_wait()?;
        let (_, child) = children.iter_mut().find(|(i, _)| *i == victim).context("no such worker")?;
        child.kill()?; // SIGKILL
        child.wait()?;
        children.retain(|(i, _)| *i != victim);
        Ok((children, at))
    }

    /// The job trained on one_device's examples step by step, none lost or repeated: at
    /// each step, the examples of the workers `trained(step, worker)` says took part.
    fn assert_same_examples(&self, reference: &Path, trained: impl Fn(u64, usize) -> bool) -> Result<()> {
        let want = recorded(reference, "local")?;
        ensure!(want.len() as u64 == self.steps, "one_device recorded {} steps", want.len());
        let recorders = (0..=WORKERS).filter(|w| *w < WORKERS || self.ids.join(format!("worker-{w}.ids")).exists());
        let tasks: Vec<(usize, BTreeMap<u64, Vec<u64>>)> =
            recorders.map(|w| Ok((w, recorded(&self.ids, &format!("worker-{w}"))?))).collect::<Result<_>>()?;
        for (step, examples) in &want {
            let mut got: Vec<u64> = tasks
                .iter()
                .filter(|(w, _)| trained(*step, *w))
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
}

/// Every re-formation a task logged: (the step it went on from, the workers it went on with).
fn reformations(log: &str) -> Result<Vec<(u64, usize)>> {
    const MARK: &str = "Continuing from step ";
    log.lines()
        .filter_map(|l| l.split(MARK).nth(1))
        .map(|rest| {
            let mut words = rest.split(' ');
            let step = words.next().context("no step")?.parse()?;
            let workers = words.nth(1).context("no worker count")?.parse()?;
            Ok((step, workers))
        })
        .collect()
}

/// Waits for `children`; all must succeed and log the same re-formations, which it returns.
fn all_finish(children: Vec<(usize, Child)>) -> Result<Vec<(u64, usize)>> {
    let mut seen: Option<Vec<(u64, usize)>> = None;
    for (i, child) in children {
        let (ok, log) = finish(child, Duration::from_secs(300))?;
        ensure!(ok, "worker:{i} failed:\n{log}");
        let mine = reformations(&log)?;
        ensure!(seen.as_ref().is_none_or(|s| *s == mine), "worker:{i} re-formed as {mine:?}, another as {seen:?}");
        seen = Some(mine);
    }
    seen.context("no worker")
}

#[test]
fn a_killed_worker_leaves_the_others_training_like_one_device() -> Result<()> {
    const STEPS: u64 = 60;
    let tmp = tempfile::tempdir()?;
    let (want, reference) = one_device(tmp.path(), STEPS)?;
    let job = Job::new(tmp.path().join("elastic"), STEPS, 2)?;
    let (survivors, killed_after) = job.start_and_kill(2)?;
    let reformed = all_finish(survivors)?;
    let what = || format!("worker:2 killed after step {killed_after}; re-formed {reformed:?}");
    let [(resumed, 2)] = reformed[..] else { anyhow::bail!("{}", what()) };
    job.assert_same_examples(&reference, |step, w| step < resumed || w != 2).with_context(what)?;
    assert_same_variables(&checkpoint_variables(&job.dir, STEPS)?, &want, "elastic vs one_device").with_context(what)
}

/// The lost worker dies inside a step's all-reduce, its peers waiting in it for its part:
/// neither commits the step, both run it again with two workers.
#[test]
fn a_worker_dying_inside_an_all_reduce_leaves_no_step_half_applied() -> Result<()> {
    const STEPS: u64 = 40;
    const AT: u64 = 20;
    let tmp = tempfile::tempdir()?;
    let (want, reference) = one_device(tmp.path(), STEPS)?;
    let job = Job::new(tmp.path().join("elastic"), STEPS, 2)?;
    let survivors: Vec<(usize, Child)> = (0..2).map(|i| Ok((i, job.worker(i)?))).collect::<Result<_>>()?;
    let victim = job.worker_with(2, &[(FAULT_IN_ALL_REDUCE_ENV, &AT.to_string())])?;
    let (ok, log) = finish(victim, Duration::from_secs(300))?;
    ensure!(!ok && log.contains("exiting inside the all-reduce of step 20"), "worker:2 did not die as asked:\n{log}");
    let reformed = all_finish(survivors)?;
    ensure!(reformed == [(AT, 2)], "the survivors re-formed as {reformed:?}, not at step {AT} with two workers");
    job.assert_same_examples(&reference, |step, w| step < AT || w != 2)?;
    assert_same_variables(&checkpoint_variables(&job.dir, STEPS)?, &want, "elastic vs one_device")
}

#[test]
fn when_the_chief_is_killed_the_next_worker_takes_over_its_checkpoints() -> Result<()> {
    const STEPS: u64 = 60;
    let tmp = tempfile::tempdir()?;
    let (want, reference) = one_device(tmp.path(), STEPS)?;
    let job = Job::new(tmp.path().join("elastic"), STEPS, 2)?;
    let (survivors, killed_after) = job.start_and_kill(0)?;
    let reformed = all_finish(survivors)?;
    let what = || format!("worker:0 (the chief) killed after step {killed_after}; re-formed {reformed:?}");
    let [(resumed, 2)] = reformed[..] else { anyhow::bail!("{}", what()) };
    ensure!(
        latest_step(&job.dir) == Some(STEPS),
        "no final checkpoint from the new chief: {:?}",
        latest_step(&job.dir)
    );
    job.assert_same_examples(&reference, |step, w| step < resumed || w != 0).with_context(what)?;
    assert_same_variables(&checkpoint_variables(&job.dir, STEPS)?, &want, "elastic vs one_device").with_context(what)
}

#[test]
fn a_killed_worker_started_again_rejoins_and_the_job_is_three_again() -> Result<()> {
    back_to_three(|job| job.worker(2))
}

/// A new machine replaces the killed worker: the same task name at a new address, which
/// waits until the group has re-formed without the old process, then joins.
#[test]
fn a_killed_worker_replaced_at_a_new_address_brings_the_job_back_to_three() -> Result<()> {
    back_to_three(|job| job.elsewhere(2))
}

/// worker:2 is killed and `replace` starts its replacement at once: the job goes on with
/// two, takes the replacement in, and ends as one_device does.
fn back_to_three(replace: impl Fn(&Job) -> Result<Child>) -> Result<()> {
    // Long enough for the replacement to start and join well before the end.
    const STEPS: u64 = 300;
    let tmp = tempfile::tempdir()?;
    let (want, reference) = one_device(tmp.path(), STEPS)?;
    let job = Job::new(tmp.path().join("elastic"), STEPS, 2)?;
    let (children, killed_after) = job.start_and_kill(2)?;
    let replacement = replace(&job)?;
    let reformed = all_finish(children)?;
    let (ok, log) = finish(replacement, Duration::from_secs(300))?;
    ensure!(ok, "the replacement failed:\n{log}");
    let what = || format!("worker:2 killed after step {killed_after}; re-formed {reformed:?}");
    let [(lost_at, 2), (joined_at, 3)] = reformed[..] else { anyhow::bail!("{}", what()) };
    ensure!(reformations(&log)? == [(joined_at, 3)], "the replacement logged {:?}; {}", reformations(&log)?, what());
    ensure!(joined_at < STEPS, "the replacement joined only at the end; {}", what());
    job.assert_same_examples(&reference, |step, w| step < lost_at || step >= joined_at || w != 2).with_context(what)?;
    assert_same_variables(&checkpoint_variables(&job.dir, STEPS)?, &want, "elastic vs one_device").with_context(what)
}

/// A fourth worker from outside the three's cluster spec joins a job with room for it
/// (`max_workers: 4`, a cluster token): the global batch is `batch_size` times four from
/// the start, and the job ends as one_device does on it.
#[test]
fn a_worker_from_outside_the_cluster_joins_and_the_job_is_four() -> Result<()> {
    const STEPS: u64 = 300;
    let tmp = tempfile::tempdir()?;
    let (want, reference) = one_device(tmp.path(), STEPS)?;
    // 6 per worker at full strength is one_device's global batch of 24.
    let job = Job { max_workers: Some(4), per_worker: 6, ..Job::new(tmp.path().join("elastic"), STEPS, 2)? };
    let (children, running_at) = job.start_and_wait()?;
    let stranger = job.elsewhere(WORKERS)?;
    let reformed = all_finish(children)?;
    let (ok, log) = finish(stranger, Duration::from_secs(300))?;
    ensure!(ok, "the worker from outside the cluster failed:\n{log}");
    let what = || format!("worker:3 started after step {running_at}; the others re-formed {reformed:?}");
    let [(joined_at, 4)] = reformed[..] else { anyhow::bail!("{}", what()) };
    ensure!(reformations(&log)? == [(joined_at, 4)], "worker:3 logged {:?}; {}", reformations(&log)?, what());
    ensure!(joined_at < STEPS, "worker:3 joined only at the end; {}", what());
    job.assert_same_examples(&reference, |step, w| w < WORKERS || step >= joined_at).with_context(what)?;
    assert_same_variables(&checkpoint_variables(&job.dir, STEPS)?, &want, "elastic vs one_device").with_context(what)
}

/// `engine launch --min-workers 2 --restart-on-failure 1`: a worker that fails is started
/// again alone and rejoins, and the job ends as one_device does.
#[test]
fn engine_launch_starts_a_failed_worker_again_and_it_rejoins() -> Result<()> {
    const STEPS: u64 = 300;
    let tmp = tempfile::tempdir()?;
    let (want, reference) = one_device(tmp.path(), STEPS)?;
    let job = Job::new(tmp.path().join("elastic"), STEPS, 2)?;
    let mut args: Vec<String> =
        ["launch", &spec_path("fashion_mnist_cnn.ron"), "--workers", "3"].map(String::from).to_vec();
    args.extend(["--min-workers", "2", "--restart-on-failure", "1", "--max-steps"].map(String::from));
    args.extend([STEPS.to_string(), "--model-dir".into(), job.dir.display().to_string()]);
    args.extend(sets(PER_WORKER));
    let out = finished(
        engine_command(&strs(&args))?
            .env(EXAMPLE_LOG_ENV, &job.ids)
            .env(engine::estimator::hooks::FAULT_ENV, "worker:2@20")
            .output()?,
    )?
    .ok()?;
    ensure!(
        out.stderr.contains("starting it again to rejoin"),
        "the launcher did not restart worker:2:\n{}",
        out.stderr
    );
    let chief: String = out.stderr.lines().filter(|l| l.starts_with("[worker:0]")).collect::<Vec<_>>().join("\n");
    let reformed = reformations(&chief)?;
    let [(20, 2), (joined_at, 3)] = reformed[..] else { anyhow::bail!("re-formed {reformed:?}:\n{}", out.stderr) };
    job.assert_same_examples(&reference, |step, w| step < 20 || step >= joined_at || w != 2)?;
    assert_same_variables(&checkpoint_variables(&job.dir, STEPS)?, &want, "elastic vs one_device")
}

#[test]
fn below_min_workers_the_job_stops_with_a_checkpoint_naming_who_is_left() -> Result<()> {
    below_min_workers(2, "(worker:0, worker:1)")
}

/// The same when the chief is the one lost: the lowest-ranked survivor saves.
#[test]
fn below_min_workers_without_the_chief_the_next_worker_saves() -> Result<()> {
    below_min_workers(0, "(worker:1, worker:2)")
}

fn below_min_workers(victim: usize, survivors_named: &str) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let job = Job::new(tmp.path().join("elastic"), 60, 3)?;
    let (survivors, _) = job.start_and_kill(victim)?;
    let leader = if victim == 0 { 1 } else { 0 };
    let mut saved_by_leader = None;
    let mut finished = Vec::new();
    for (i, child) in survivors {
        let (ok, log) = finish(child, Duration::from_secs(300))?;
        finished.push((i, ok, log));
    }
    // Every survivor's log on any failure: one that missed the other's rendezvous (CI saw
    // worker:1 wait its 10 s alone once) is explained by the other's log, not its own.
    let logs: Vec<String> = finished.iter().map(|(i, _, log)| format!("--- worker:{i} ---\n{log}")).collect();
    let logs = logs.join("\n");
    for (i, ok, log) in &finished {
        ensure!(!ok, "worker:{i} trained on below min_workers:\n{logs}");
        ensure!(log.contains("within 10s"), "worker:{i} did not wait the connect timeout:\n{logs}");
        ensure!(log.contains("fewer than min_workers = 3"), "worker:{i}'s error does not say why:\n{logs}");
        ensure!(log.contains(survivors_named), "worker:{i}'s error does not name the survivors:\n{logs}");
        let saved = log.lines().find(|l| l.contains("before stopping")).and_then(|l| l.split("model.ckpt-").nth(1));
        let saved = saved.and_then(|rest| rest.split(' ').next()).map(str::parse::<u64>).transpose()?;
        ensure!(saved.is_some() == (*i == leader), "worker:{i} saved {saved:?}; worker:{leader} leads:\n{logs}");
        saved_by_leader = saved_by_leader.or(saved);
    }
    // The leader saved the last step the survivors completed, and the model dir names it.
    ensure!(latest_step(&job.dir) == saved_by_leader, "latest {:?}, saved {saved_by_leader:?}", latest_step(&job.dir));
    Ok(())
}
