//! `engine launch`: a local cluster for trying multi-worker training on one machine. Each
//! task is a real `engine run` process with its own `TF_CONFIG` (the same JSON a TFJob
//! gives its pods), listening on a free 127.0.0.1 port; their logs come back prefixed by
//! task. When a task fails the others are stopped (a synchronous job cannot go on without
//! it), and with `--restart-on-failure K` the whole cluster is started again, up to K
//! times: every task resumes from the chief's latest checkpoint. Each task's environment
//! has `ENGINE_RESTART_COUNT`: 0 on the first start, then the number of restarts.
//!
//! To see a restart happen, `ENGINE_FAULT_EXIT_AT_STEP=worker:1@12` makes that task exit
//! at step 12 of the first start (`engine_estimator::hooks::FaultInjectionHook`).

use super::{CliError, SpecArgs, run::TOKEN_ENV};
use engine_estimator::hooks::RESTART_COUNT_ENV;
use engine_runtime::cluster::{Cluster, ClusterSource, ClusterSpec, TaskId};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    #[command(flatten)]
    pub common: SpecArgs,
    /// Training tasks (worker 0 is the chief).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
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
}

pub fn launch(args: &LaunchArgs) -> Result<(), CliError> {
    let strategy = args.common.strategy.map(|s| s.name().to_string()).unwrap_or_else(|| "multi_worker".into());
    if strategy != "multi_worker" {
        return Err(CliError::Usage(format!("engine launch runs multi_worker clusters, not '{strategy}'")));
    }
    let exe = std::env::current_exe().map_err(|e| CliError::Launch(format!("cannot find the engine executable: {e}")))?;
    // One token per launch: tasks of another cluster on this machine cannot join this one.
    let token = format!("{:016x}{:016x}", rand_u64(), rand_u64());
    let mut attempt = 0;
    loop {
        let cluster = local_cluster(args.workers as usize, args.evaluator)?;
        log::info!("Launching {} on 127.0.0.1 (attempt {})", cluster, attempt + 1);
        match run_cluster(args, &exe, &cluster, &token, &strategy, attempt)? {
            None => return Ok(()),
            Some(failure) if attempt < args.restart_on_failure => {
                attempt += 1;
                log::warn!("{failure}; restarting the cluster ({attempt} of {})", args.restart_on_failure);
            }
            Some(failure) => return Err(CliError::Launch(failure)),
        }
    }
}

/// A cluster of `workers` workers (and an evaluator) on free loopback ports. The ports are
/// held until every one is chosen, so no two tasks get the same.
fn local_cluster(workers: usize, evaluator: bool) -> Result<ClusterSpec, CliError> {
    let listeners: Vec<TcpListener> = (0..workers + usize::from(evaluator))
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()
        .map_err(|e| CliError::Launch(format!("cannot find free ports on 127.0.0.1: {e}")))?;
    let mut addresses = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.to_string()))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| CliError::Launch(format!("cannot read a bound port: {e}")))?;
    let evaluator = if evaluator { addresses.pop().into_iter().collect() } else { Vec::new() };
    Ok(ClusterSpec { chief: Vec::new(), worker: addresses, ps: Vec::new(), evaluator })
}

/// Runs every task to its end. `None` when all succeeded, else what failed first: every
/// task found failed when the first failure is noticed (a task that fails because a peer
/// died often exits within milliseconds of it, so which came first cannot be told).
fn run_cluster(
    args: &LaunchArgs,
    exe: &std::path::Path,
    spec: &ClusterSpec,
    token: &str,
    strategy: &str,
    restarts: u32,
) -> Result<Option<String>, CliError> {
    let mut tasks: Vec<(TaskId, Child)> = Vec::new();
    for id in spec.task_ids().collect::<Vec<_>>() {
        let cluster = Cluster::new(spec.clone(), id, ClusterSource::Flags, None)?;
        let mut cmd = Command::new(exe);
        cmd.arg("run").arg(&args.common.spec).arg("--strategy").arg(strategy);
        for set in &args.common.set {
            cmd.arg("--set").arg(set);
        }
        if let Some(n) = args.max_steps {
            cmd.arg("--max-steps").arg(n.to_string());
        }
        if let Some(dir) = &args.model_dir {
            cmd.arg("--model-dir").arg(dir);
        }
        cmd.env("TF_CONFIG", cluster.to_tf_config())
            .env(TOKEN_ENV, token)
            .env(RESTART_COUNT_ENV, restarts.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| CliError::Launch(format!("cannot start {id}: {e}")))?;
        forward(&id, child.stdout.take());
        forward(&id, child.stderr.take());
        tasks.push((id, child));
    }
    let failure = loop {
        let mut running = 0;
        let mut failed = Vec::new();
        for (id, child) in tasks.iter_mut() {
            match child.try_wait() {
                Ok(None) => running += 1,
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) => failed.push(format!("{id} failed ({})", describe(status))),
                Err(e) => failed.push(format!("cannot watch {id}: {e}")),
            }
        }
        if !failed.is_empty() {
            break Some(failed.join(", "));
        }
        if running == 0 {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if let Some(f) = &failure {
        for (id, child) in tasks.iter_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                log::warn!("{f}: stopping {id}");
                let _ = child.kill();
            }
        }
    }
    for (_, child) in tasks.iter_mut() {
        let _ = child.wait();
    }
    Ok(failure)
}

/// Copies a task's output to ours, line by line, prefixed with the task.
fn forward(id: &TaskId, stream: Option<impl Read + Send + 'static>) {
    let Some(stream) = stream else { return };
    let prefix = format!("[{id}]");
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(|l| l.ok()) {
            // Results (the final dicts `engine run` prints) go to stdout, logs to stderr.
            if line.starts_with('{') {
                println!("{prefix} {line}");
            } else {
                eprintln!("{prefix} {line}");
            }
        }
    });
}

fn describe(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("killed by signal {signal}");
        }
    }
    match status.code() {
        Some(code) => format!("exit code {code}"),
        None => "no exit code".into(),
    }
}

/// A random u64 from the OS's hasher keys (no extra dependency for a launch token).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}
