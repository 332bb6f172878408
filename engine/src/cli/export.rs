//! `engine export`: a checkpoint of the spec's model as an export directory (the engine's
//! saved model and `model.onnx`), for `engine serve` or any ONNX runtime.

use super::{
    CliError, SpecArgs,
    eval::{checkpoint_location, evaluation_estimator, model_dir_override},
};
use crate::job;
use clap::Args;
use engine_estimator::{EstimatorError, model_dir::ModelDir};
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub common: SpecArgs,
    /// The checkpoint: a name in the model dir (`model.ckpt-200`) or a path or URL;
    /// defaults to the latest.
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<String>,
    /// The export directory to create (local or `s3://`); it must not exist. Defaults to
    /// `<model_dir>/export/<unix time>`, as TensorFlow's `export_saved_model` names them.
    #[arg(long, value_name = "DIR")]
    pub output: Option<String>,
    /// The model directory (overrides `run_config.model_dir`).
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<String>,
}

pub fn export(args: &ExportArgs) -> Result<(), CliError> {
    let spec = Arc::new(args.common.load(model_dir_override(args.model_dir.as_deref()))?);
    let estimator = evaluation_estimator(&spec, &args.common, &super::DeviceArgs::default())?;
    let serving_input = job::serving_input(&spec)?;
    let checkpoint = checkpoint_location(&estimator, args.checkpoint.as_deref())?;
    let at = match &args.output {
        None => {
            let base = estimator.model_dir().url_of("export");
            estimator.export_saved_model(&base, &serving_input, Some(&checkpoint))?
        }
        Some(out) => {
            let trimmed = out.trim_end_matches('/');
            let (parent, leaf) = match trimmed.rsplit_once('/') {
                Some(("", leaf)) => ("/", leaf),
                Some((parent, leaf)) if !parent.ends_with(':') && !parent.ends_with('/') => (parent, leaf),
                Some(_) | None => (".", trimmed),
            };
            if leaf.is_empty() || leaf == "." || leaf == ".." {
                return Err(CliError::Usage(format!("--output {out}: name a new directory to create")));
            }
            let base = ModelDir::open_with(parent, estimator.config().s3.as_ref()).map_err(EstimatorError::from)?;
            estimator.export_to(&base, leaf, &serving_input, Some(&checkpoint))?
        }
    };
    super::output(&format!("{at}\n"));
    Ok(())
}
