//! `engine eval`: evaluate a checkpoint (the model dir's latest, or `--checkpoint`) on the
//! spec's `eval_input`, with `Estimator::evaluate`, and print the result as `engine run`
//! does.

use super::{CliError, DeviceArgs, SpecArgs, run::python_dict};
use crate::{
    job,
    spec::{ErrorKind, FieldPath, Override, Spec, syntax::Value},
};
use clap::Args;
use engine_estimator::{Estimator, EstimatorError};
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub common: SpecArgs,
    /// The checkpoint to evaluate: a name in the model dir (`model.ckpt-200`) or a path or
    /// URL; defaults to the model dir's latest.
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<String>,
    /// The model directory (overrides `run_config.model_dir`).
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<String>,
    #[command(flatten)]
    pub devices: DeviceArgs,
}

pub fn eval(args: &EvalArgs) -> Result<(), CliError> {
    let spec = Arc::new(args.common.load(model_dir_override(args.model_dir.as_deref()))?);
    let estimator = evaluation_estimator(&spec, &args.common, &args.devices)?;
    let eval_input = job::eval_input_fn(&spec)?.ok_or_else(|| missing_eval_input(&spec, "engine eval"))?;
    let checkpoint = checkpoint_location(&estimator, args.checkpoint.as_deref())?;
    let es = &spec.job.eval_spec;
    let hooks = job::hooks_of(&spec, &es.hooks)?;
    let result = estimator
        .evaluate(eval_input.as_ref(), es.steps, hooks, Some(&checkpoint), es.name.as_deref())
        .map_err(|e| super::label_error::locate(&spec, e))?;
    super::output(&format!("{}\n", python_dict(&result)));
    Ok(())
}

/// `--model-dir` as an override, checked like `--set run_config.model_dir=...`.
pub(super) fn model_dir_override(dir: Option<&str>) -> Vec<Override> {
    dir.map(|dir| {
        let path = FieldPath::root().field("run_config").field("model_dir");
        Override::flag(&format!("--model-dir {dir}"), path, Value::Str(dir.to_string()))
    })
    .into_iter()
    .collect()
}

/// The spec's Estimator, with the evaluation strategy for both roles (nothing trains).
pub(super) fn evaluation_estimator(
    spec: &Arc<Spec>,
    common: &SpecArgs,
    devices: &DeviceArgs,
) -> Result<Estimator, CliError> {
    super::checkpoints::require_existing(&spec.job.run_config.model_dir)?;
    let mut config = common.run_config(spec, devices);
    config.train_distribute = config.eval_strategy();
    Ok(job::estimator(spec.clone(), config)?)
}

pub(super) fn missing_eval_input(spec: &Spec, command: &str) -> CliError {
    let why = format!("`{command}` reads the `eval_input` section, and the spec has none");
    CliError::Spec(spec.error(FieldPath::root().field("eval_input"), ErrorKind::Invalid(why)))
}

/// Where the checkpoint to read is. A bare name (`model.ckpt-200`, as the `checkpoint` state
/// file and `engine checkpoints` show them) is in the model dir; anything else is a path or
/// URL. Without `--checkpoint`, the latest, or an error naming the model dir.
pub(super) fn checkpoint_location(estimator: &Estimator, given: Option<&str>) -> Result<String, CliError> {
    let model_dir = estimator.model_dir();
    match given {
        Some(name) if !name.contains('/') && !std::path::Path::new(name).exists() => Ok(model_dir.url_of(name)),
        Some(path) => Ok(path.to_string()),
        None => match estimator.latest_checkpoint()? {
            Some(latest) => Ok(model_dir.url_of(&latest)),
            None => Err(CliError::Estimator(EstimatorError::Other(format!(
                "no checkpoint in {}: train with `engine run` first, or pass --checkpoint",
                model_dir.location()
            )))),
        },
    }
}
