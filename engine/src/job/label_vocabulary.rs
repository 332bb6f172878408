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

/// Its fingerprint, written beside it (and beside the checkpoints) when the model was
/// first trained. The file's order is the meaning of every class id the checkpoints
/// hold: two lines swapped by hand would silently relabel the model (an evaluation went
/// from 0.75 to 0.57 accuracy, reported as the model's), so an edited file is refused.
pub const LABEL_VOCABULARY_FINGERPRINT: &str = "label_vocabulary.crc32c";

/// The label column and its classes, when the job's training input is a table with string
/// labels and no vocabulary: the model dir's (what the model was trained with), else the
/// training table's.
pub fn label_vocabulary(spec: &Spec) -> Result<Option<(String, Vec<String>)>, SpecError> {
    let section = &spec.job.train_input.path;
    let train: InputSpec = spec.decode(section)?;
    let Some((column, inferred)) = train.infer_label_vocabulary().map_err(|e| input_error(spec, section, e))? else {
        return Ok(None);
    };
    match stored(spec)? {
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

/// The vocabulary stored in the spec's model dir, if it has one (a missing local dir is
/// not made), checked against the fingerprint stored with it.
fn stored(spec: &Spec) -> Result<Option<Vec<String>>, SpecError> {
    let model_dir = &spec.job.run_config.model_dir;
    let read = |name: &str| -> Option<String> {
        match Location::parse(model_dir).ok()? {
            Location::Local(path) => std::fs::read_to_string(path.join(name)).ok(),
            _ => String::from_utf8(ModelDir::open(model_dir).ok()?.get_if_exists(name).ok()??.data).ok(),
        }
    };
    let Some(text) = read(LABEL_VOCABULARY_FILE) else { return Ok(None) };
    if let Some(want) = read(LABEL_VOCABULARY_FINGERPRINT)
        && want.trim() != fingerprint(&text)
    {
        let path = crate::spec::FieldPath::root().field("run_config").field("model_dir");
        return Err(spec.error(
            path,
            crate::spec::ErrorKind::Invalid(format!(
                "{LABEL_VOCABULARY_FILE} in {model_dir} was changed after the model was trained with it (its \
                 fingerprint was {}, it is now {}): its order is what each class id of the checkpoints means, so an \
                 edited file would relabel the model silently. Restore the file as it was saved",
                want.trim(),
                fingerprint(&text)
            )),
        ));
    }
    let classes: Vec<String> = text.lines().map(str::to_string).collect();
    Ok((!classes.is_empty()).then_some(classes))
}

/// The vocabulary file's fingerprint: CRC-32C of its bytes, in hex.
fn fingerprint(text: &str) -> String {
    format!("{:08x}", crc32c::crc32c(text.as_bytes()))
}

/// Writes the vocabulary into the model dir unless it holds one (every task of a cluster
/// may try; the first write wins and the content is the same).
pub fn save_label_vocabulary(spec: &Spec, classes: &[String]) -> Result<(), super::JobError> {
    let dir = ModelDir::open(&spec.job.run_config.model_dir).map_err(engine_estimator::EstimatorError::from)?;
    let text = classes.iter().map(|c| format!("{c}\n")).collect::<String>();
    // The fingerprint first: a vocabulary is never there without it (a crash between the
    // two leaves a fingerprint of the same text, which the next run's write matches).
    dir.put_if_absent(LABEL_VOCABULARY_FINGERPRINT, fingerprint(&text).into_bytes())
        .map_err(engine_estimator::EstimatorError::from)?;
    if let PutOutcome::Written(_) =
        dir.put_if_absent(LABEL_VOCABULARY_FILE, text.into_bytes()).map_err(engine_estimator::EstimatorError::from)?
    {
        log::info!("Label classes {classes:?} saved to {}", dir.url_of(LABEL_VOCABULARY_FILE));
    }
    Ok(())
}
