//! The command line: `engine plan`, `run`, `eval`, `predict`, `checkpoints`, `launch`,
//! `export` and `serve`.

mod checkpoints;
mod cpu_bind;
mod error;
mod eval;
mod export;
mod label_error;
mod launch;
pub mod logging;
mod plan;
pub mod ports;
mod predict;
mod run;
mod serve;
mod settings;
mod utc;

pub use checkpoints::CheckpointsArgs;
pub use error::{CliError, exit};
pub use eval::EvalArgs;
pub use export::ExportArgs;
pub use launch::LaunchArgs;
pub use predict::PredictArgs;
pub use serve::ServeArgs;
pub use settings::DeviceArgs;

use crate::{
    lower::Mode,
    spec::{FieldPath, Override, Spec, StrategyKind, syntax::Value},
};
use clap::{Args, Parser, Subcommand};
use std::{path::PathBuf, process::ExitCode};

#[derive(Debug, Parser)]
#[command(name = "engine", version, about = "A graph-compiling training engine for RON job specs")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compile a job spec and print the plan: passes, schedule with shapes, flops,
    /// variables and peak memory.
    Plan(PlanArgs),
    /// Train the job spec's model and evaluate it.
    Run(RunArgs),
    /// Evaluate a checkpoint (the latest by default) on the spec's `eval_input`.
    Eval(EvalArgs),
    /// Write the model's predictions for an input, one JSON object per example.
    Predict(PredictArgs),
    /// List a model directory's checkpoints: step, save time, size, latest, leases.
    Checkpoints(CheckpointsArgs),
    /// Start a local cluster of `engine run` processes on 127.0.0.1 (one per task), with
    /// their logs prefixed by task; stop them all if one fails.
    Launch(LaunchArgs),
    /// Write a checkpoint of the model as an export: the engine's saved model (for `engine
    /// serve`) and `model.onnx` (for onnxruntime and other ONNX runtimes).
    Export(ExportArgs),
    /// Answer TensorFlow Serving's REST API (`/v1/models/NAME:predict`) from an export,
    /// batching concurrent requests.
    Serve(ServeArgs),
}

/// What every command that reads a spec takes.
#[derive(Debug, Args)]
pub struct SpecArgs {
    /// The RON job spec.
    pub spec: PathBuf,
    /// Override a value of the spec: `--set run_config.save_checkpoints_steps=200`
    /// (the value is RON; text that is not RON is taken as a string).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// The distribution strategy; defaults to the spec's `run_config.train_distribute`
    /// (`eval_distribute` for evaluation), else `default`.
    #[arg(long, value_name = "NAME")]
    pub strategy: Option<StrategyKind>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub common: SpecArgs,
    /// Which graph to compile.
    #[arg(long, default_value = "train", value_parser = parse_mode)]
    pub mode: Mode,
    /// Write the graph in Graphviz's dot language to stdout, or to FILE with `--dot=FILE`
    /// (the `=` keeps `--dot SPEC` from taking the spec for the file).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    pub dot: Option<PathBuf>,
    /// The batch size for the statistics (1 to 65536); defaults to the input's `batch_size`.
    #[arg(long, value_name = "N", value_parser = parse_batch)]
    pub batch: Option<usize>,
    /// The devices the plan is placed on, as for `engine run` (they must exist here).
    #[command(flatten)]
    pub devices: DeviceArgs,
    /// Print only the model summary: each layer's type, output shape and parameters, and
    /// the totals (Keras' `model.summary()`).
    #[arg(long)]
    pub summary: bool,
    /// ps tasks to place the variables on, for `parameter_server` (1 to 64; without a
    /// cluster from TF_CONFIG).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub ps: Option<u16>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub common: SpecArgs,
    /// Stop at this global step (overrides `train_spec.max_steps`).
    #[arg(long, value_name = "N")]
    pub max_steps: Option<u64>,
    /// Where checkpoints and summaries go (overrides `run_config.model_dir`).
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<String>,
    #[command(flatten)]
    pub devices: DeviceArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Where this process sits in a cluster (`multi_worker`, `parameter_server`). Without these
/// flags the cluster comes from `TF_CONFIG`, else torchrun's environment, else Slurm's.
#[derive(Debug, Args, Default)]
pub struct ClusterArgs {
    /// The cluster's tasks: `chief=host:port;worker=host:port,host:port;evaluator=host:port`
    /// (or one role per flag).
    #[arg(long, value_name = "ROLE=HOST:PORT,...")]
    pub cluster: Vec<String>,
    /// This process's task: `worker:1`, `chief`, `evaluator`.
    #[arg(long, value_name = "TYPE:INDEX")]
    pub task: Option<String>,
    /// A file with the shared token every task presents (default: $ENGINE_CLUSTER_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds a collective waits for a missing task before failing with its name.
    #[arg(long, value_name = "SECS")]
    pub collective_timeout: Option<u64>,
    /// Seconds a task waits at start for every other task before naming the missing ones
    /// (default 120).
    #[arg(long, value_name = "SECS")]
    pub connect_timeout: Option<u64>,
    /// How tasks all-reduce: `auto` (shared memory when all are on this host, else the
    /// gRPC ring), `ring`, or `shared_memory`; overrides `run_config.communication`.
    #[arg(long, value_name = "auto|ring|shared_memory")]
    pub communication: Option<engine_runtime::transport::Communication>,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

/// Plan statistics multiply sizes by the batch; the bound keeps them exact.
pub const MAX_PLAN_BATCH: usize = 1 << 16;

fn parse_batch(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_PLAN_BATCH).contains(&n) => Ok(n),
        _ => Err(format!("expected a batch size from 1 to {MAX_PLAN_BATCH}")),
    }
}

impl SpecArgs {
    /// Reads the spec with the `--set` overrides and any `extra` ones from dedicated flags.
    pub fn load(&self, extra: Vec<Override>) -> Result<Spec, CliError> {
        let mut overrides = self.set.iter().map(|s| Override::parse(s)).collect::<Result<Vec<_>, _>>()?;
        overrides.extend(extra);
        Ok(Spec::from_file(&self.spec, &overrides)?)
    }
}

impl RunArgs {
    /// `--max-steps` and `--model-dir` are overrides like `--set`, so they are checked alike.
    fn overrides(&self) -> Vec<Override> {
        let mut v = Vec::new();
        if let Some(n) = self.max_steps {
            let path = FieldPath::root().field("train_spec").field("max_steps");
            v.push(Override::flag(&format!("--max-steps {n}"), path, Value::Int(n.into())));
        }
        if let Some(dir) = &self.model_dir {
            let path = FieldPath::root().field("run_config").field("model_dir");
            v.push(Override::flag(&format!("--model-dir {dir}"), path, Value::Str(dir.clone())));
        }
        v
    }
}

/// Writes a command's result to stdout. A reader that went away (`engine plan | head`, a
/// launcher that was killed) is no reason to fail after the work is done.
pub(crate) fn output(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Runs a parsed command line.
pub fn execute(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Plan(args) => plan::plan(&args),
        Command::Run(args) => run::run(&args),
        Command::Eval(args) => eval::eval(&args),
        Command::Predict(args) => predict::predict(&args),
        Command::Checkpoints(args) => checkpoints::checkpoints(&args),
        Command::Launch(args) => launch::launch(&args),
        Command::Export(args) => export::export(&args),
        Command::Serve(args) => serve::serve(&args),
    }
}

/// The binary's entry point: parse arguments (clap exits with status 2 on usage errors),
/// execute, print any error on stderr with the status [`CliError::exit_code`] gives.
pub fn main() -> ExitCode {
    logging::init();
    // SIGTERM and SIGINT stop training after the step in flight, with a checkpoint.
    if let Err(e) = engine_estimator::preemption::install() {
        log::warn!("cannot handle SIGTERM and SIGINT ({e}): a signal will end the process without a checkpoint");
    }
    match execute(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: it panics when stderr is gone (a launcher that was killed).
            use std::io::Write;
            let _ = std::io::stderr().lock().write_all(format!("error: {e}\n").as_bytes());
            ExitCode::from(e.exit_code())
        }
    }
}
