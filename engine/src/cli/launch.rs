//! `engine launch`: a local cluster for trying multi-worker or parameter-server training
//! (`--ps N`) on one machine. Each
//! task is a real `engine run` process with its own `TF_CONFIG` (the same JSON a TFJob
//! gives its pods), listening on a free 127.0.0.1 port; their logs come back prefixed by
//! task. When a task fails the others are stopped (a synchronous job cannot go on without
//! it; with ps tasks, a failed worker is restarted alone or left out, since asynchronous
//! training goes on without it; an elastic job, `--min-workers`, re-forms without it and,
//! with `--restart-on-failure`, takes it back when it is started again alone), and with `--restart-on-failure K` the whole cluster is started again, up to K
//! times: every task resumes from the chief's latest checkpoint. Each task's environment
//! has `ENGINE_RESTART_COUNT`: 0 on the first start, then the number of restarts.
//!
//! To see a restart happen, `ENGINE_FAULT_EXIT_AT_STEP=worker:1@12` makes that task exit
//! at step 12 of the first start (`engine_estimator::hooks::FaultInjectionHook`).
//!
//! The tasks live and die with the launcher. Each runs in a process group of its own, so a
//! Ctrl-C in the terminal reaches the launcher alone, which forwards it (and SIGTERM) to
//! every task: they agree on a final step, the chief saves it, all exit, and the launcher
//! exits with the signal's status. A second signal ends the launcher at once; whatever ends
//! it, its tasks see their lifeline pipe close and stop the same way: no task is left
//! training on its own.
//!
//! The training tasks share this machine's CPUs: by default each is bound to a disjoint
//! share of them, with as many compute threads (`--cpu-bind`, `cpu_bind`).

use super::{
    CliError, SpecArgs,
    cpu_bind::{self, CpuBind},
    run::{LAUNCHER_FD_ENV, TOKEN_ENV},
};
use engine_estimator::strategy::StrategyKind;
use engine_estimator::{
    hooks::RESTART_COUNT_ENV,
    preemption::{self, Signal},
};
use engine_runtime::{
    DeviceName,
    cluster::{Cluster, ClusterSource, ClusterSpec, TaskId, TaskType},
};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    #[command(flatten)]
    pub common: SpecArgs,
    /// Training tasks (worker 0 is the chief).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// ps tasks holding the variables: trains with `parameter_server` (the default strategy
    /// when this is given).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=64))]
    pub ps: u16,
    /// Add an evaluator task that evaluates each new checkpoint.
    #[arg(long)]
    pub evaluator: bool,
    /// Start the cluster again (all tasks resume from the latest checkpoint) up to this
    /// many times after a task fails.
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub restart_on_failure: u32,
    /// Passed to every task's `engine run`.
    #[arg(long, value_name = "N")]
    pub max_steps: Option<u64>,
    /// Passed to every task's `engine run`.
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<String>,
    /// Every task's `--device` (`cpu`, `wgpu[:N]`, `cuda[:N]`); tasks on one machine
    /// share it.
    #[arg(long, value_name = "DEVICE", default_value_t = DeviceName::CPU)]
    pub device: DeviceName,
    /// An elastic job: when a worker fails, the others re-form at the next step and go on,
    /// down to this many (`run_config.min_workers`); the launcher keeps them running.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub min_workers: Option<u16>,
    /// With `--min-workers`: the most workers the job trains with (`run_config.max_workers`;
    /// by default `--workers`). More leaves room for tasks started by hand with the same
    /// $ENGINE_CLUSTER_TOKEN, from outside the launched cluster.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub max_workers: Option<u16>,
    /// `auto`: each training task runs on a disjoint share of the CPUs (as many compute
    /// threads, unless RAYON_NUM_THREADS is set) when there are at least as many CPUs as
    /// training tasks; `none`: the OS places every task.
    #[arg(long, value_enum, default_value_t = CpuBind::Auto)]
    pub cpu_bind: CpuBind,
}

pub fn launch(args: &LaunchArgs) -> Result<(), CliError> {
    let default = if args.ps > 0 { StrategyKind::ParameterServer } else { StrategyKind::MultiWorker };
    let strategy = args.common.strategy.unwrap_or(default);
    match (strategy, args.ps) {
        (StrategyKind::MultiWorker, 0) | (StrategyKind::ParameterServer, 1..) => {}
        (StrategyKind::MultiWorker, _) => {
            return Err(CliError::Usage(
                "multi_worker keeps the variables on every worker: --ps is for --strategy parameter_server".into(),
            ));
        }
        (StrategyKind::ParameterServer, 0) => {
            return Err(CliError::Usage("parameter_server needs ps tasks: pass --ps N (1 or more)".into()));
        }
        _ => {
            return Err(CliError::Usage(format!(
                "engine launch runs multi_worker and parameter_server clusters, not '{strategy}'"
            )));
        }
    }
    // The bounds travel to every task as overrides; the spec read with them says whether
    // the job is elastic, which decides what a failed worker means here.
    let mut sets = args.common.set.clone();
    sets.extend(args.min_workers.map(|n| format!("run_config.min_workers={n}")));
    sets.extend(args.max_workers.map(|n| format!("run_config.max_workers={n}")));
    let spec =
        super::SpecArgs { spec: args.common.spec.clone(), set: sets.clone(), strategy: Some(strategy) }.load(vec![])?;
    let run_config = &spec.job.run_config;
    let elastic = run_config.min_workers.is_some() || run_config.max_workers.is_some();
    if elastic && strategy != StrategyKind::MultiWorker {
        return Err(CliError::Usage("--min-workers and --max-workers are for multi_worker clusters".into()));
    }
    let fail = |message: String| CliError::Launch { message, code: None };
    let exe = std::env::current_exe().map_err(|e| fail(format!("cannot find the engine executable: {e}")))?;
    // One token per launch: tasks of another cluster on this machine cannot join this one.
    // Unless the caller gives one: then tasks it starts by hand with that token may join an
    // elastic job from outside the launched cluster (up to max_workers).
    let token = match std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()) {
        Some(token) => token,
        None => random_token().map_err(|e| fail(format!("cannot read the OS's random source: {e}")))?,
    };
    let mut attempt = 0;
    loop {
        let cluster = local_cluster(args.workers as usize, args.ps as usize, args.evaluator)?;
        log::info!("Launching {} on 127.0.0.1 (attempt {})", cluster, attempt + 1);
        match run_cluster(args, &sets, elastic, &exe, &cluster, &token, strategy, attempt)? {
            Ending::Succeeded => return Ok(()),
            Ending::Preempted(signal) => {
                return Err(CliError::Launch {
                    message: format!(
                        "received {signal}: every task stopped (the chief saved its final step); run again to resume"
                    ),
                    code: Some(signal.exit_code()),
                });
            }
            Ending::Failed { message, .. } if attempt < args.restart_on_failure => {
                attempt += 1;
                log::warn!("{message}; restarting the cluster ({attempt} of {})", args.restart_on_failure);
            }
            Ending::Failed { message, code } | Ending::Incomplete { message, code } => {
                return Err(CliError::Launch { message, code });
            }
        }
    }
}

/// How one start of the cluster ended.
enum Ending {
    Succeeded,
    /// The launcher was asked to stop; every task has stopped.
    Preempted(Signal),
    /// A task failed; `code` is its exit status (128 + the signal when one killed it).
    Failed {
        message: String,
        code: Option<u8>,
    },
    /// Every task ended, but a worker the asynchronous job went on without had failed for
    /// good: not restarted (the job is done), but not a success either.
    Incomplete {
        message: String,
        code: Option<u8>,
    },
}

/// A cluster of `workers` workers, `ps` ps tasks (and an evaluator) on free loopback
/// ports. The ports are held until every one is chosen, so no two tasks get the same.
fn local_cluster(workers: usize, ps: usize, evaluator: bool) -> Result<ClusterSpec, CliError> {
    let fail = |message: String| CliError::Launch { message, code: None };
    let listeners = super::ports::free_loopback_ports(workers + ps + usize::from(evaluator))
        .map_err(|e| fail(format!("cannot find free ports on 127.0.0.1: {e}")))?;
    let mut addresses = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.to_string()))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| fail(format!("cannot read a bound port: {e}")))?;
    let evaluator = if evaluator { addresses.pop().into_iter().collect() } else { Vec::new() };
    let ps = addresses.split_off(workers);
    Ok(ClusterSpec { chief: Vec::new(), worker: addresses, ps, evaluator })
}

/// Runs every task to its end. Fails on the first failure noticed, naming every task found
/// failed then (a task that fails because a peer died often exits within milliseconds of
/// it, so which came first cannot be told), after stopping the others.
#[allow(clippy::too_many_arguments, reason = "one cluster start: what it runs, where and how")]
fn run_cluster(
    args: &LaunchArgs,
    sets: &[String],
    elastic: bool,
    exe: &std::path::Path,
    spec: &ClusterSpec,
    token: &str,
    strategy: StrategyKind,
    restarts: u32,
) -> Result<Ending, CliError> {
    let lifeline =
        Lifeline::new().map_err(|e| CliError::Launch { message: format!("cannot create a pipe: {e}"), code: None })?;
    let bindings = bindings(args.cpu_bind, spec);
    let start = |id: TaskId, restarts: u32| -> Result<Child, CliError> {
        let cluster = Cluster::new(spec.clone(), id, ClusterSource::Flags, None)?;
        let mut cmd = Command::new(exe);
        cmd.arg("run").arg(&args.common.spec).arg("--strategy").arg(strategy.name());
        for set in sets {
            cmd.arg("--set").arg(set);
        }
        if let Some(n) = args.max_steps {
            cmd.arg("--max-steps").arg(n.to_string());
        }
        if let Some(dir) = &args.model_dir {
            cmd.arg("--model-dir").arg(dir);
        }
        cmd.arg("--device").arg(args.device.to_string());
        if let Some((_, cpus)) = bindings.iter().find(|(task, _)| *task == id) {
            cpu_bind::bind(&mut cmd, cpus);
        }
        cmd.env("TF_CONFIG", cluster.to_tf_config())
            .env(TOKEN_ENV, token)
            .env(RESTART_COUNT_ENV, restarts.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        tie_to_launcher(&mut cmd, &lifeline);
        let mut child =
            cmd.spawn().map_err(|e| CliError::Launch { message: format!("cannot start {id}: {e}"), code: None })?;
        forward(&id, child.stdout.take(), Stream::Out);
        forward(&id, child.stderr.take(), Stream::Err);
        Ok(child)
    };
    let mut tasks: Vec<(TaskId, Child)> = Vec::new();
    for id in spec.task_ids().collect::<Vec<_>>() {
        tasks.push((id, start(id, restarts)?));
    }
    // With ps tasks, training is asynchronous: a worker that fails stops nobody. It is
    // started again while restarts remain, and rejoins; else the others go on without it.
    let asynchronous = !spec.ps.is_empty();
    let mut worker_restarts = 0;
    let mut stopping: Option<Signal> = None;
    // Tasks left out after failing for good: the job goes on, but its status says so.
    let mut given_up: Vec<(TaskId, ExitStatus)> = Vec::new();
    let ending = loop {
        if let (Some(signal), None) = (preemption::requested(), stopping) {
            stopping = Some(signal);
            log::info!("Received {signal}: asking every task to stop after its step in flight");
            for (_, child) in tasks.iter_mut() {
                if matches!(child.try_wait(), Ok(None)) {
                    signal_task(child, signal.0);
                }
            }
        }
        let mut running = 0;
        let mut failed = Vec::new();
        let mut codes = Vec::new();
        for (id, child) in tasks.iter_mut() {
            match child.try_wait() {
                Ok(None) => running += 1,
                Ok(Some(status)) if status.success() => {}
                // Tasks asked to stop exit with the signal's status: expected, not a failure.
                Ok(Some(status)) if stopping.is_some_and(|s| status_code(status) == Some(s.exit_code())) => {}
                // A job that goes on without a failed task: with ps tasks its workers train
                // asynchronously; an elastic job's survivors re-form without it. Started
                // again while restarts remain, it rejoins.
                Ok(Some(status))
                    if stopping.is_none()
                        && (asynchronous && id.task_type == TaskType::Worker
                            || elastic && id.task_type.is_collective()) =>
                {
                    let (others, again, without) = match elastic {
                        true => ("the others re-form without it", " to rejoin", "the others re-form without it"),
                        false => ("the others go on", "", "the others go on without it"),
                    };
                    if worker_restarts < args.restart_on_failure {
                        worker_restarts += 1;
                        log::warn!(
                            "{id} failed ({}); {others}; starting it again{again} ({worker_restarts} of {})",
                            describe(status),
                            args.restart_on_failure
                        );
                        *child = start(*id, restarts + worker_restarts)?;
                        running += 1;
                    } else if !given_up.iter().any(|(g, _)| g == id) {
                        log::warn!("{id} failed ({}); {without}", describe(status));
                        given_up.push((*id, status));
                    }
                }
                Ok(Some(status)) => {
                    codes.extend(status_code(status));
                    failed.push(format!("{id} failed ({})", describe(status)));
                }
                Err(e) => failed.push(format!("cannot watch {id}: {e}")),
            }
        }
        if !failed.is_empty() {
            // A permanent failure (1-127) decides: restarting will not cure it, whatever
            // retryable failures of peers it caused.
            let code = codes.iter().copied().filter(|c| *c < 128).min().or_else(|| codes.first().copied());
            break Ending::Failed { message: failed.join(", "), code };
        }
        if running == 0 {
            break match stopping {
                Some(signal) => Ending::Preempted(signal),
                // Every training task of an elastic job ended, and some failed: the job
                // finished if a survivor did (it trained to the end, then saved).
                None if !given_up.is_empty() && elastic => {
                    let collective = tasks.iter().filter(|(id, _)| id.task_type.is_collective()).count();
                    let named: Vec<String> =
                        given_up.iter().map(|(id, s)| format!("{id} ({})", describe(*s))).collect();
                    if given_up.len() < collective {
                        log::warn!("The job finished without {}", named.join(", "));
                        Ending::Succeeded
                    } else {
                        let code = given_up.iter().filter_map(|(_, s)| status_code(*s)).min();
                        Ending::Failed { message: format!("every training task failed: {}", named.join(", ")), code }
                    }
                }
                None if !given_up.is_empty() => {
                    let named: Vec<String> =
                        given_up.iter().map(|(id, s)| format!("{id} ({})", describe(*s))).collect();
                    let codes = given_up.iter().filter_map(|(_, s)| status_code(*s));
                    // The failure as it was: a permanent one (1-127) first, as when it stops a job.
                    let code = codes.clone().filter(|c| *c < 128).min().or_else(|| codes.clone().next());
                    Ending::Incomplete {
                        message: format!(
                            "the others finished without {}, which failed with no restarts left: its share of the \
                             steps is missing from the job; see its log above",
                            named.join(", ")
                        ),
                        code,
                    }
                }
                None => Ending::Succeeded,
            };
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if let Ending::Failed { message, .. } = &ending {
        for (id, child) in tasks.iter_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                log::warn!("{message}: stopping {id}");
                let _ = child.kill();
            }
        }
    }
    for (_, child) in tasks.iter_mut() {
        let _ = child.wait();
    }
    Ok(ending)
}

/// The CPUs of each training task (chief and workers), in task order; empty when the
/// tasks are not bound (logged either way).
fn bindings(bind: CpuBind, spec: &ClusterSpec) -> Vec<(TaskId, Vec<usize>)> {
    if bind == CpuBind::None {
        return Vec::new();
    }
    let training: Vec<TaskId> =
        spec.task_ids().filter(|t| matches!(t.task_type, TaskType::Chief | TaskType::Worker)).collect();
    let allowed = cpu_bind::allowed_cpus();
    let Some(sets) = cpu_bind::split(&allowed, training.len()) else {
        log::info!(
            "{} training tasks on {} CPUs: not binding them to CPUs (--cpu-bind none to silence this)",
            training.len(),
            allowed.len()
        );
        return Vec::new();
    };
    let bound: Vec<(TaskId, Vec<usize>)> = training.into_iter().zip(sets).collect();
    let threads = std::env::var("RAYON_NUM_THREADS")
        .map_or_else(|_| "one compute thread per CPU".into(), |n| format!("RAYON_NUM_THREADS={n}"));
    let list: Vec<String> = bound.iter().map(|(t, cpus)| format!("{t} on CPU {}", cpu_bind::describe(cpus))).collect();
    log::info!("Binding training tasks: {} ({threads}; --cpu-bind none to let the OS place them)", list.join(", "));
    bound
}

/// The read end of a pipe whose write end only the launcher holds. The kernel closes the
/// write end when the launcher dies, however it dies; every task watches its read end
/// (`ENGINE_LAUNCHER_FD`, see `run`), and the end of file is its stop request. Unlike a
/// parent-death signal, which Linux sends again each time the child is passed to another
/// thread of the dying parent (a second signal would end the task without its checkpoint),
/// an end of file comes once.
struct Lifeline {
    read: libc::c_int,
    write: libc::c_int,
}

impl Lifeline {
    fn new() -> std::io::Result<Lifeline> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes. Both ends are
        // close-on-exec: each task gets the read end by `tie_to_launcher`, none the write end.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Lifeline { read: fds[0], write: fds[1] })
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        // SAFETY: both descriptors are ours and closed once.
        unsafe {
            libc::close(self.read);
            libc::close(self.write);
        }
    }
}

/// Puts the task in a process group of its own (a terminal's Ctrl-C goes to the launcher,
/// which forwards it once) and hands it the lifeline's read end, so that it stops when the
/// launcher dies: a task never outlives its launcher.
fn tie_to_launcher(cmd: &mut Command, lifeline: &Lifeline) {
    use std::os::unix::process::CommandExt;
    let fd = lifeline.read;
    cmd.env(LAUNCHER_FD_ENV, fd.to_string());
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (setpgid, fcntl) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 || libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn signal_task(child: &Child, signal: i32) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill with a valid pid and signal has no memory effects.
        unsafe { libc::kill(pid, signal) };
    }
}

#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// Copies a task's output to ours, line by line, prefixed with the task. Each line goes out
/// in one write, so lines of different tasks never interleave.
fn forward(id: &TaskId, stream: Option<impl Read + Send + 'static>, to: Stream) {
    let Some(stream) = stream else { return };
    let prefix = format!("[{id}]");
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(|l| l.ok()) {
            let text = format!("{prefix} {line}\n");
            // Results (the final dicts `engine run` prints) go to stdout, logs to stderr. A
            // closed stream (the launcher's reader went away) is not worth dying for.
            let _ = match to {
                Stream::Out => std::io::stdout().lock().write_all(text.as_bytes()),
                Stream::Err => std::io::stderr().lock().write_all(text.as_bytes()),
            };
        }
    });
}

/// The exit status as a shell reports it: the code, or 128 + the signal that killed it.
fn status_code(status: ExitStatus) -> Option<u8> {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).ok(),
        (None, Some(signal)) => u8::try_from(128 + signal).ok(),
        (None, None) => None,
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        return format!("killed by signal {signal}");
    }
    match status.code() {
        Some(code) => format!("exit code {code}"),
        None => "no exit code".into(),
    }
}

/// 128 bits from the OS's random source, in hex.
fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
