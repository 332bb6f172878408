//! TensorBoard summaries from a custom loop, written by the chief only.

use crate::{Result, model_dir::ModelDir, summary::SummaryWriter};

/// Scalars for TensorBoard's event files. On tasks other than the chief every write is
/// dropped, so one loop body serves every task (TF writes them to a temporary directory
/// and deletes it).
pub struct LoopSummaries {
    writer: Option<SummaryWriter>,
}

impl LoopSummaries {
    pub fn new(directory: &str, writes: bool) -> Result<Self> {
        let writer = if writes { Some(SummaryWriter::new(&ModelDir::open(directory)?, "")?) } else { None };
        Ok(LoopSummaries { writer })
    }

    pub fn scalar(&mut self, tag: &str, step: u64, value: f64) -> Result<()> {
        match &mut self.writer {
            Some(w) => Ok(w.scalar(tag, step, value)?),
            None => Ok(()),
        }
    }

    /// Makes what was written readable (TensorBoard reads the file as it grows).
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.writer {
            Some(w) => Ok(w.flush()?),
            None => Ok(()),
        }
    }

    /// The event file's path or URL, on the chief.
    pub fn url(&self) -> Option<String> {
        self.writer.as_ref().map(|w| w.url())
    }
}
