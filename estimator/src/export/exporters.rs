//! TensorFlow's exporters: which evaluations leave an export behind, and how many stay.
//!
//! Each writes to `<model_dir>/export/<name>/<timestamp>/`, on local disk or an object
//! store, and keeps its newest `exports_to_keep`.

use super::{MANIFEST, Manifest, ServingInput};
use crate::{Estimator, EvalResult, Exporter, Result, model_dir::ModelDir};

/// `LatestExporter`: an export after every evaluation.
pub struct LatestExporter {
    name: String,
    serving_input: ServingInput,
    exports_to_keep: Option<usize>,
}

impl LatestExporter {
    /// TensorFlow's default keeps 5; `None` keeps every export.
    pub fn new(name: impl Into<String>, serving_input: ServingInput, exports_to_keep: Option<usize>) -> Self {
        LatestExporter { name: name.into(), serving_input, exports_to_keep }
    }
}

impl Exporter for LatestExporter {
    fn name(&self) -> &str {
        &self.name
    }

    fn export(
        &mut self,
        estimator: &Estimator,
        checkpoint: &str,
        result: &EvalResult,
        _is_the_final_export: bool,
    ) -> Result<Option<String>> {
        let at = export(estimator, &self.name, &self.serving_input, checkpoint, result)?;
        garbage_collect(estimator, &self.name, self.exports_to_keep)?;
        Ok(Some(at))
    }
}

/// `FinalExporter`: one export, of the final evaluation.
pub struct FinalExporter {
    name: String,
    serving_input: ServingInput,
}

impl FinalExporter {
    pub fn new(name: impl Into<String>, serving_input: ServingInput) -> Self {
        FinalExporter { name: name.into(), serving_input }
    }
}

impl Exporter for FinalExporter {
    fn name(&self) -> &str {
        &self.name
    }

    fn export(
        &mut self,
        estimator: &Estimator,
        checkpoint: &str,
        result: &EvalResult,
        is_the_final_export: bool,
    ) -> Result<Option<String>> {
        if !is_the_final_export {
            return Ok(None);
        }
        export(estimator, &self.name, &self.serving_input, checkpoint, result).map(Some)
    }
}

/// Which of two evaluations is better: TensorFlow's `compare_fn`, by one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Compare {
    pub metric: String,
    pub higher_is_better: bool,
}

impl Compare {
    /// TensorFlow's default `_loss_smaller`.
    pub fn loss_smaller() -> Self {
        Compare { metric: "loss".into(), higher_is_better: false }
    }

    pub fn smaller(metric: impl Into<String>) -> Self {
        Compare { metric: metric.into(), higher_is_better: false }
    }

    pub fn larger(metric: impl Into<String>) -> Self {
        Compare { metric: metric.into(), higher_is_better: true }
    }

    /// Whether `current` beats `best`. A metric the evaluation lacks is an error: a typo
    /// would otherwise export nothing, silently.
    pub fn is_better(&self, best: Option<f64>, current: &EvalResult) -> Result<bool> {
        let value = current.get(&self.metric).copied().ok_or_else(|| {
            crate::EstimatorError::Other(format!(
                "BestExporter compares '{}', which the evaluation does not report (it reports: {})",
                self.metric,
                current.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
        Ok(self.beats(value, best))
    }

    /// Whether a finite `value` is better than `best` (anything is better than nothing).
    fn beats(&self, value: f64, best: Option<f64>) -> bool {
        value.is_finite()
            && match best {
                None => true,
                Some(b) if self.higher_is_better => value > b,
                Some(b) => value < b,
            }
    }
}

/// `BestExporter`: an export whenever an evaluation beats the best so far (which a
/// restarted job reads back from the exports' manifests).
pub struct BestExporter {
    name: String,
    serving_input: ServingInput,
    compare: Compare,
    exports_to_keep: Option<usize>,
    best: Option<Option<f64>>,
}

impl BestExporter {
    pub fn new(
        name: impl Into<String>,
        serving_input: ServingInput,
        compare: Compare,
        exports_to_keep: Option<usize>,
    ) -> Self {
        BestExporter { name: name.into(), serving_input, compare, exports_to_keep, best: None }
    }

    /// The best value among the exports already written.
    fn best_so_far(&mut self, estimator: &Estimator) -> Result<Option<f64>> {
        if let Some(best) = self.best {
            return Ok(best);
        }
        let mut best: Option<f64> = None;
        for (_, manifest) in exports(estimator.model_dir(), &self.name)? {
            if let Some(v) = manifest.metrics.get(&self.compare.metric).copied()
                && self.compare.beats(v, best)
            {
                best = Some(v);
            }
        }
        self.best = Some(best);
        Ok(best)
    }
}

impl Exporter for BestExporter {
    fn name(&self) -> &str {
        &self.name
    }

    fn export(
        &mut self,
        estimator: &Estimator,
        checkpoint: &str,
        result: &EvalResult,
        _is_the_final_export: bool,
    ) -> Result<Option<String>> {
        let best = self.best_so_far(estimator)?;
        if !self.compare.is_better(best, result)? {
            return Ok(None);
        }
        let at = export(estimator, &self.name, &self.serving_input, checkpoint, result)?;
        self.best = Some(result.get(&self.compare.metric).copied());
        garbage_collect(estimator, &self.name, self.exports_to_keep)?;
        Ok(Some(at))
    }
}

fn export(
    estimator: &Estimator,
    name: &str,
    serving_input: &ServingInput,
    checkpoint: &str,
    result: &EvalResult,
) -> Result<String> {
    let base = export_base(estimator, name)?;
    let stamp = super::export_model::fresh_timestamp(&base)?;
    let checkpoint_url = estimator.model_dir().url_of(checkpoint);
    estimator.export_with_metrics(&base, &stamp, serving_input, Some(&checkpoint_url), result)
}

fn export_base(estimator: &Estimator, name: &str) -> Result<ModelDir> {
    let location = estimator.model_dir().url_of(&format!("export/{name}"));
    Ok(ModelDir::open_with(&location, estimator.config().s3.as_ref())?)
}

/// The complete exports of an exporter, oldest first: `(timestamp, manifest)`.
pub fn exports(model_dir: &ModelDir, name: &str) -> Result<Vec<(u64, Manifest)>> {
    let prefix = format!("export/{name}");
    let mut out = Vec::new();
    for stamp in versions(model_dir, &prefix)? {
        let data = model_dir.get(&format!("{prefix}/{stamp}/{MANIFEST}"))?;
        if let Ok(manifest) = serde_json::from_slice::<Manifest>(&data) {
            out.push((stamp, manifest));
        }
    }
    Ok(out)
}

/// The numbered exports under `prefix` (`""`: the directory itself) that have their
/// manifest, oldest first: staging directories and uncommitted prefixes are not versions.
pub(crate) fn versions(dir: &ModelDir, prefix: &str) -> Result<Vec<u64>> {
    let lead = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
    let mut out: Vec<u64> = dir
        .list(prefix)?
        .into_iter()
        .filter_map(|info| {
            let (stamp, file) = info.name.strip_prefix(&lead)?.split_once('/')?;
            (file == MANIFEST).then(|| stamp.parse::<u64>().ok()).flatten()
        })
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Deletes all but the newest `keep` exports (the manifest first, so that a reader never
/// takes a half-deleted export for a whole one).
fn garbage_collect(estimator: &Estimator, name: &str, keep: Option<usize>) -> Result<()> {
    let Some(keep) = keep else { return Ok(()) };
    let all = exports(estimator.model_dir(), name)?;
    let dir = estimator.model_dir();
    for (stamp, _) in all.iter().take(all.len().saturating_sub(keep)) {
        let prefix = format!("export/{name}/{stamp}");
        dir.delete(&format!("{prefix}/{MANIFEST}"))?;
        match dir.local_path(&prefix)? {
            Some(path) => {
                std::fs::remove_dir_all(&path)
                    .map_err(|e| crate::EstimatorError::Other(format!("cannot remove {}: {e}", path.display())))?;
            }
            None => {
                for info in dir.list(&prefix)? {
                    dir.delete(&info.name)?;
                }
            }
        }
        log::info!("Removed the old export {}", dir.url_of(&prefix));
    }
    Ok(())
}
