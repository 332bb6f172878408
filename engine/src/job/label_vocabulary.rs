//! The classes of a table whose label column holds strings (`Coat`, `Sandal`) and was given
//! no vocabulary: inferred from the training table (its distinct values, sorted), stored
//! in the model dir beside the checkpoints, and given to every input of the job so that a
//! class has one index in training, evaluation and prediction, where it is printed back
//! as its string.

use super::input_error;
use crate::spec::{Spec, SpecError};
use engine_estimator::{
    input::InputSpec,
    model_dir::{Location, ModelDir, PutOutcome},
};

/// The file in the model dir: one class per line, in index order (TensorFlow's vocabulary
/// file format, as `DNNClassifier(label_vocabulary=...)` exports it).
pub const LABEL_VOCABULARY_FILE: &str = "label_vocabulary.txt";

/// The label column and its classes, when the job's training input is a table with string
/// labels and no vocabulary: the model dir's (what the model was trained with), else the
/// training table's.
pub fn label_vocabulary(spec: &Spec) -> Result<Option<(String, Vec<String>)>, SpecError> {
    let section = &spec.job.train_input.path;
    let train: InputSpec = spec.decode(section)?;
    let Some((column, inferred)) = train.infer_label_vocabulary().map_err(|e| input_error(spec, section, e))? else {
        return Ok(None);
    };
    match stored(&spec.job.run_config.model_dir) {
        Some(classes) if classes != inferred => {
            log::warn!(
                "the training table's labels are now {inferred:?}; the model in {} was trained with {classes:?} \
                 ({LABEL_VOCABULARY_FILE}), which is used",
                spec.job.run_config.model_dir
            );
            Ok(Some((column, classes)))
        }
        _ => Ok(Some((column, inferred))),
    }
}

/// The vocabulary stored in a model dir, if it has one (a missing local dir is not made).
fn stored(model_dir: &str) -> Option<Vec<String>> {
    let text = match Location::parse(model_dir).ok()? {
        Location::Local(path) => std::fs::read_to_string(path.join(LABEL_VOCABULARY_FILE)).ok()?,
        _ => {
            String::from_utf8(ModelDir::open(model_dir).ok()?.get_if_exists(LABEL_VOCABULARY_FILE).ok()??.data).ok()?
        }
    };
    let classes: Vec<String> = text.lines().map(str::to_string).collect();
    (!classes.is_empty()).then_some(classes)
}

/// Writes the vocabulary into the model dir unless it holds one (every task of a cluster
/// may try; the first write wins and the content is the same).
pub fn save_label_vocabulary(spec: &Spec, classes: &[String]) -> Result<(), crate::cli::CliError> {
    let dir = ModelDir::open(&spec.job.run_config.model_dir).map_err(engine_estimator::EstimatorError::from)?;
    let text = classes.iter().map(|c| format!("{c}\n")).collect::<String>();
    if let PutOutcome::Written(_) =
        dir.put_if_absent(LABEL_VOCABULARY_FILE, text.into_bytes()).map_err(engine_estimator::EstimatorError::from)?
    {
        log::info!("Label classes {classes:?} saved to {}", dir.url_of(LABEL_VOCABULARY_FILE));
    }
    Ok(())
}
