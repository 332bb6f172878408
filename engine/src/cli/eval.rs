//! `engine eval`: evaluate a checkpoint (the model dir's latest, or `--checkpoint`) on the
//! spec's `eval_input`, with `Estimator::evaluate`, and print the result as `engine run`
//! does.

use super::{CliError, DeviceArgs, SpecArgs, run::python_dict};
use crate::{
    job,
    spec::{ErrorKind, FieldPath, Metric, Override, Spec, syntax::Value},
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
    /// Also print the confusion matrix (row = the label's class, column = the predicted
    /// class), as the `ConfusionMatrix` metric counts it; added when the spec lacks it.
    #[arg(long)]
    pub confusion_matrix: bool,
    #[command(flatten)]
    pub devices: DeviceArgs,
}

pub fn eval(args: &EvalArgs) -> Result<(), CliError> {
    let mut spec = args.common.load(model_dir_override(args.model_dir.as_deref()))?;
    if args.confusion_matrix && !spec.job.metrics.contains(&Metric::ConfusionMatrix) {
        if !spec.job.loss.kind.is_softmax() {
            let why = format!("--confusion-matrix counts classes: it needs a softmax loss, not {}", spec.job.loss);
            return Err(CliError::Spec(spec.error(FieldPath::root().field("loss"), ErrorKind::Invalid(why))));
        }
        spec.job.metrics.push(Metric::ConfusionMatrix);
    }
    let spec = Arc::new(spec);
    let estimator = evaluation_estimator(&spec, &args.common, &args.devices)?;
    let eval_input = job::eval_input_fn(&spec)?.ok_or_else(|| missing_eval_input(&spec, "engine eval"))?;
    let checkpoint = checkpoint_location(&estimator, args.checkpoint.as_deref())?;
    let es = &spec.job.eval_spec;
    let hooks = job::hooks_of(&spec, &es.hooks)?;
    let (result, matrices) = estimator
        .evaluate_with_matrices(eval_input.as_ref(), es.steps, hooks, Some(&checkpoint), es.name.as_deref())
        .map_err(|e| super::label_error::locate(&spec, e))?;
    super::output(&format!("{}\n", python_dict(&result)));
    if args.confusion_matrix
        && let Some(matrix) = matrices.get(&Metric::ConfusionMatrix.key())
    {
        let names = job::label_vocabulary(&spec)?.map(|(_, classes)| classes);
        super::output(&table(matrix, names.as_deref()));
    }
    Ok(())
}

/// The matrix as aligned text: a header of predicted classes, one row per label's class.
fn table(matrix: &[Vec<u64>], names: Option<&[String]>) -> String {
    let name = |k: usize| names.and_then(|n| n.get(k).cloned()).unwrap_or_else(|| k.to_string());
    let row_width = (0..matrix.len()).map(|k| name(k).len()).max().unwrap_or(1).max("label".len());
    let widths: Vec<usize> = (0..matrix.len())
        .map(|c| matrix.iter().map(|r| r[c].to_string().len()).max().unwrap_or(1).max(name(c).len()))
        .collect();
    let mut out = format!("confusion matrix (rows: label, columns: predicted)\n{:>row_width$}", "label");
    for (c, w) in widths.iter().enumerate() {
        out.push_str(&format!("  {:>w$}", name(c)));
    }
    out.push('\n');
    for (k, row) in matrix.iter().enumerate() {
        out.push_str(&format!("{:>row_width$}", name(k)));
        for (v, w) in row.iter().zip(&widths) {
            out.push_str(&format!("  {v:>w$}"));
        }
        out.push('\n');
    }
    out
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
