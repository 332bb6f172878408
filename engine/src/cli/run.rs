//! `engine run`: train the spec's model with `train_and_evaluate` (or `train` when the
//! spec has no `eval_input`), resuming from the model directory's latest checkpoint.

use super::{CliError, ClusterArgs, RunArgs};
use crate::job;
use engine_estimator::{
    EvalResult, EvalSpec, RunConfig, StepLimit, TrainSpec, strategy::StrategyKind, train_and_evaluate,
};
use std::sync::Arc;

pub fn run(args: &RunArgs) -> Result<(), CliError> {
    watch_launcher();
    let spec = Arc::new(args.common.load(args.overrides())?);
    let mut config = args.common.run_config(&spec, &args.devices);
    args.cluster.apply(&mut config)?;
    let estimator = job::estimator(spec.clone(), config)?;
    let train_input = job::train_input_fn(&spec)?;
    if let Some((_, classes)) = job::label_vocabulary(&spec)? {
        job::save_label_vocabulary(&spec, &classes)?;
    }
    let train_hooks = job::hooks_of(&spec, &spec.job.train_spec.hooks)?;
    let max_steps = spec.job.train_spec.max_steps;
    let with_epochs = |t: TrainSpec| match spec.job.train_spec.epochs {
        Some(e) => t.with_epochs(e),
        None => t,
    };
    match job::eval_input_fn(&spec)? {
        Some(eval_input) => {
            let es = &spec.job.eval_spec;
            let eval_spec = EvalSpec {
                input_fn: eval_input,
                steps: es.steps,
                name: es.name.clone(),
                hooks: job::hooks_of(&spec, &es.hooks)?,
                exporters: job::exporters(&spec)?,
                start_delay_secs: es.start_delay_secs,
                throttle_secs: es.throttle_secs,
                every_n_steps: es.every_n_steps,
            };
            let train_spec = with_epochs(TrainSpec::from_shared(train_input, max_steps)).with_hooks(train_hooks);
            let result = train_and_evaluate(&estimator, train_spec, eval_spec)
                .map_err(|e| super::label_error::locate(&spec, e))?;
            super::output(&format!("{}\n", python_dict(&result)));
        }
        None => {
            let last = with_epochs(TrainSpec::from_shared(train_input.clone(), max_steps)).last_step(&estimator)?;
            let limit = last.map(StepLimit::MaxSteps).unwrap_or(StepLimit::UntilInputEnds);
            let outcome = estimator
                .train(train_input.as_ref(), train_hooks, limit, Vec::new())
                .map_err(|e| super::label_error::locate(&spec, e))?;
            super::output(&format!(
                "{{'global_step': {}, 'loss': {}}}\n",
                outcome.global_step,
                outcome.loss.map(|l| format!("{l:.7}")).unwrap_or("None".into())
            ));
        }
    }
    Ok(())
}

/// The environment variable holding the cluster's shared token.
pub const TOKEN_ENV: &str = engine_estimator::distribute::CLUSTER_TOKEN_ENV;

/// Set by `engine launch`: the descriptor of a pipe only the launcher writes to. Its end of
/// file means the launcher is gone, and this task stops as on SIGTERM.
pub const LAUNCHER_FD_ENV: &str = "ENGINE_LAUNCHER_FD";

/// Watches the launcher's lifeline (see `launch`), if this task has one.
fn watch_launcher() {
    let Some(fd) = std::env::var(LAUNCHER_FD_ENV).ok().and_then(|v| v.parse::<libc::c_int>().ok()) else { return };
    std::thread::spawn(move || {
        let mut byte = 0u8;
        loop {
            // SAFETY: reads at most one byte into `byte`; the descriptor was inherited for this.
            let n = unsafe { libc::read(fd, (&raw mut byte).cast(), 1) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break;
            }
        }
        log::warn!("the launcher is gone: stopping after the step in flight");
        engine_estimator::preemption::request(engine_estimator::preemption::Signal::TERM);
    });
}

impl ClusterArgs {
    /// Puts this process's cluster (flags, else `TF_CONFIG`, else torchrun's variables,
    /// else Slurm's), its token and the collective settings into `config`, for the
    /// strategies that span processes. Cluster flags with a single-process strategy are a
    /// mistake worth stopping for; a `TF_CONFIG` left in the environment is only noted.
    pub fn apply(&self, config: &mut RunConfig) -> Result<(), CliError> {
        let options = &mut config.strategy;
        if let Some(secs) = self.collective_timeout {
            options.collective_timeout = std::time::Duration::from_secs(secs);
        }
        if let Some(secs) = self.connect_timeout {
            options.connect_timeout = std::time::Duration::from_secs(secs);
        }
        if let Some(communication) = self.communication {
            options.communication = communication;
        }
        if config.strategy.elastic.is_some() && config.train_distribute != StrategyKind::MultiWorker {
            return Err(CliError::Usage(format!(
                "run_config.min_workers and max_workers make an elastic multi_worker job, not strategy '{}': run with \
                 --strategy multi_worker, or remove them",
                config.train_distribute
            )));
        }
        let (cluster, token) = cluster_of(self, config.train_distribute)?;
        config.strategy.cluster = cluster;
        config.strategy.cluster_token = token.map(engine_estimator::ClusterToken);
        Ok(())
    }
}

/// This process's cluster and token, for the strategies that span processes.
fn cluster_of(
    args: &ClusterArgs,
    strategy: engine_estimator::strategy::StrategyKind,
) -> Result<(Option<engine_runtime::cluster::Cluster>, Option<String>), CliError> {
    use engine_runtime::cluster::{ClusterFlags, resolve_from_process_env};
    let flags = ClusterFlags { cluster: args.cluster.clone(), task: args.task.clone() };
    if !strategy.spans_processes() {
        if !flags.is_empty() {
            return Err(CliError::Usage(format!(
                "--cluster and --task are for multi_worker, not strategy '{strategy}'"
            )));
        }
        if std::env::var_os(engine_runtime::cluster::TF_CONFIG).is_some() {
            log::info!("TF_CONFIG is set but strategy '{strategy}' runs in one process; ignoring it");
        }
        return Ok((None, None));
    }
    let cluster = resolve_from_process_env(&flags)?;
    if let Some(c) = &cluster {
        log::info!("Cluster from {}: {} ({c})", c.source(), c.spec());
    }
    let token = match &args.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| CliError::Usage(format!("cannot read the token file {}: {e}", path.display())))?
                .trim()
                .to_string(),
        ),
        None => std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()),
    };
    if let (Some(c), None) = (&cluster, &token) {
        log::warn!("{}", unauthenticated(c));
    }
    Ok((cluster, token))
}

/// The warning for a cluster whose tasks present no shared secret: whatever reaches their
/// ports can join the job, read its variables and send it gradients.
pub(crate) fn unauthenticated(cluster: &engine_runtime::cluster::Cluster) -> String {
    format!(
        "this cluster ({}) runs unauthenticated: any process that reaches its ports can join the job, read its \
         variables and send it gradients; give every task the same secret in ${TOKEN_ENV} or --token-file \
         (`engine launch` makes one for the tasks it starts)",
        cluster.spec()
    )
}

/// The evaluation result as TensorFlow users see it printed: `{'accuracy': 0.8712, ...}`.
pub(super) fn python_dict(result: &EvalResult) -> String {
    let items: Vec<String> = result
        .iter()
        .map(|(k, v)| if k == "global_step" { format!("'{k}': {}", *v as u64) } else { format!("'{k}': {v:.7}") })
        .collect();
    format!("{{{}}}", items.join(", "))
}
