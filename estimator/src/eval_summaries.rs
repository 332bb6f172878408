//! Where evaluation results go for TensorBoard: one event file per evaluation directory
//! for the estimator's life (not one per evaluation), and a curve that only moves forward.

use crate::{
    Result,
    model_dir::ModelDir,
    summary::{SummaryWriter, event_files, read_event_file},
};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The suffix of the directory that takes evaluations of checkpoints older than the last
/// point of their curve (`engine eval --checkpoint model.ckpt-200` after step 1000 was
/// evaluated): TensorBoard draws a run's points in the order written, so appending them
/// to `eval/` would bend its curve back; beside it they are a run of their own.
pub const BACKFILL_SUFFIX: &str = "_backfill";

pub(crate) struct EvalSummaries {
    model_dir: ModelDir,
    curves: Mutex<BTreeMap<String, Curve>>,
}

struct Curve {
    writer: SummaryWriter,
    /// The highest step written to this directory, by any process so far.
    last_step: Option<u64>,
}

impl EvalSummaries {
    pub fn new(model_dir: ModelDir) -> Self {
        EvalSummaries { model_dir, curves: Mutex::new(BTreeMap::new()) }
    }

    /// Writes `values` at `step` into `dir`, or into `dir` + [`BACKFILL_SUFFIX`] when
    /// `dir`'s curve already reaches past `step`; returns the directory written.
    pub fn write(&self, dir: &str, step: u64, values: &[(&str, f64)]) -> Result<String> {
        self.write_with(dir, step, |w| w.scalars(step, values))
    }

    /// Writes Markdown `text` under `tag` at `step`, beside the scalars (see [`Self::write`]).
    pub fn write_text(&self, dir: &str, step: u64, tag: &str, text: &str) -> Result<String> {
        self.write_with(dir, step, |w| w.text(tag, step, text))
    }

    fn write_with(
        &self,
        dir: &str,
        step: u64,
        write: impl FnOnce(&mut SummaryWriter) -> crate::summary::Result<()>,
    ) -> Result<String> {
        let mut curves =
            self.curves.lock().map_err(|_| crate::EstimatorError::Other("eval summaries lock poisoned".into()))?;
        let behind = self.curve(&mut curves, dir)?.last_step.is_some_and(|last| step < last);
        let target = if behind { format!("{dir}{BACKFILL_SUFFIX}") } else { dir.to_string() };
        let curve = self.curve(&mut curves, &target)?;
        write(&mut curve.writer)?;
        curve.writer.flush()?;
        curve.last_step = curve.last_step.max(Some(step));
        Ok(target)
    }

    fn curve<'c>(&self, curves: &'c mut BTreeMap<String, Curve>, dir: &str) -> Result<&'c mut Curve> {
        if !curves.contains_key(dir) {
            let last_step = last_step(&self.model_dir, dir)?;
            let writer = SummaryWriter::new(&self.model_dir, dir)?;
            curves.insert(dir.to_string(), Curve { writer, last_step });
        }
        curves.get_mut(dir).ok_or_else(|| crate::EstimatorError::Other(format!("no writer for {dir}")))
    }
}

/// The highest step of a summary already in `dir`'s event files (earlier runs' included).
fn last_step(model_dir: &ModelDir, dir: &str) -> Result<Option<u64>> {
    let mut last = None;
    for file in event_files(model_dir, dir)? {
        for event in read_event_file(model_dir, &file)? {
            if event.summary.is_some() {
                last = last.max(u64::try_from(event.step).ok());
            }
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_per_directory_and_old_steps_go_beside_the_curve() -> Result<()> {
        let dir = ModelDir::open("memory://eval-summaries/run")?;
        let summaries = EvalSummaries::new(dir.clone());
        assert_eq!(summaries.write("eval", 100, &[("loss", 1.0)])?, "eval");
        assert_eq!(summaries.write("eval", 200, &[("loss", 0.5)])?, "eval");
        assert_eq!(summaries.write("eval", 150, &[("loss", 0.7)])?, "eval_backfill");
        assert_eq!(summaries.write("eval", 200, &[("loss", 0.5)])?, "eval", "the same step again is not a fold");
        assert_eq!(event_files(&dir, "eval")?.len(), 1);
        // A later estimator on the same model dir knows where the curve ended.
        let later = EvalSummaries::new(dir.clone());
        assert_eq!(later.write("eval", 120, &[("loss", 0.9)])?, "eval_backfill");
        assert_eq!(later.write("eval", 300, &[("loss", 0.4)])?, "eval");
        Ok(())
    }
}
