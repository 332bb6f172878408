//! A testing aid, armed only by its environment variable: each task appends the source
//! indices of every step it feeds to a file of its own, so that a test can count what a job
//! saw (an elastic job that lost a worker must have lost or repeated no example). A step
//! that failed and was run again is recorded twice; the last record counts.

use crate::{EstimatorError, Result};
use std::io::Write;
use std::path::Path;

/// The directory the files go to (one per task: `worker-1.ids`, or `local.ids`).
pub const EXAMPLE_LOG_ENV: &str = "ENGINE_EXAMPLE_LOG_DIR";

pub(crate) struct ExampleLog {
    file: std::io::BufWriter<std::fs::File>,
}

impl ExampleLog {
    /// The log of `task` when the variable is set.
    pub fn from_env(task: Option<String>) -> Result<Option<ExampleLog>> {
        let Some(dir) = std::env::var_os(EXAMPLE_LOG_ENV) else { return Ok(None) };
        let name = task.map_or_else(|| "local".to_string(), |t| t.replace(':', "-"));
        let path = Path::new(&dir).join(format!("{name}.ids"));
        let file =
            std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(|e| {
                EstimatorError::Config(format!("{EXAMPLE_LOG_ENV}: cannot open {}: {e}", path.display()))
            })?;
        Ok(Some(ExampleLog { file: std::io::BufWriter::new(file) }))
    }

    /// `STEP ID ID ...`: the examples of every local replica's batch of `step`, as it starts.
    pub fn record(&mut self, step: u64, ids: &[Vec<u64>]) -> Result<()> {
        let ids: Vec<String> = ids.iter().flatten().map(u64::to_string).collect();
        writeln!(self.file, "{step} {}", ids.join(" "))
            .and_then(|()| self.file.flush())
            .map_err(|e| EstimatorError::Other(format!("{EXAMPLE_LOG_ENV}: {e}")))
    }
}
