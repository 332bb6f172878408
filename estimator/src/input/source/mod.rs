//! Sources: random access to the examples of a data set by index.
//!
//! Every source, whatever its format, answers "example `i`" in any order: IDX and in-memory
//! tensors trivially, CSV by parsing the file once when opened, TFRecord by indexing each
//! record's offset when opened. A list of files is the concatenation of its files. That makes
//! the rest of the pipeline a pure function of a stream of indices, which is what makes
//! sharding, shuffling and resuming deterministic and cheap (the module docs of `input`
//! explain).

pub(crate) mod cache_hint;
pub(crate) mod csv;
pub(crate) mod example_proto;
pub(crate) mod files;
pub(crate) mod idx;
pub(crate) mod image_folder;
pub(crate) mod tensors;
pub(crate) mod tfrecord;

use super::error::Result;
use super::schema::{Row, Schema, append_row, host_data_with_capacity};
use engine_graph::HostData;
use std::path::PathBuf;

/// One file's examples in a source's index space: `start..start + count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileSpan {
    pub path: PathBuf,
    pub start: u64,
    pub count: u64,
}

pub(crate) trait Source: Send + Sync + std::fmt::Debug {
    /// A stable one-line description (kind, files, size), part of the dataset fingerprint
    /// that keeps an iterator state from being restored into another dataset.
    fn describe(&self) -> String;

    fn len(&self) -> u64;

    fn schema(&self) -> &Schema;

    /// The files in index order (empty for in-memory data), for file-level sharding.
    fn files(&self) -> &[FileSpan];

    /// Decodes example `index` (< `len`).
    fn read(&self, index: u64) -> Result<Row>;

    /// Appends example `index` to a batch's columns (one per schema column, in order),
    /// as appending `read(index)`'s values would. A source holding its examples in memory
    /// overrides it to decode straight into the batch: no row of fresh vectors to
    /// allocate, fill, copy and free for every example, which was most of the decoding
    /// thread's time on the MLP.
    fn read_into(&self, index: u64, columns: &mut [HostData]) -> Result<()> {
        let row = self.read(index)?;
        append_row(columns, self.schema(), index, &row)
    }

    /// A hint that `read(index)` comes soon: a source held in memory starts loading the
    /// example's bytes into cache (see `cache_hint`). Others ignore it.
    fn prefetch(&self, _index: u64) {}

    /// Where example `index` comes from, for a person to find it: the file and its
    /// position there (`data/train.csv line 18`, `train-images-idx3-ubyte.gz example 7`).
    fn locate(&self, index: u64) -> String {
        match self.files().iter().find(|f| (f.start..f.start + f.count).contains(&index)) {
            Some(f) => format!("{} example {}", f.path.display(), index - f.start + 1),
            None => format!("example {} of {}", index + 1, self.describe()),
        }
    }
}

/// `read` for a source that decodes straight into columns (`read_into`): one example into
/// empty ones, so that both paths share one decoder.
pub(crate) fn row_from_read_into<S: Source + ?Sized>(source: &S, index: u64) -> Result<Row> {
    let mut values: Vec<HostData> =
        source.schema().columns().map(|c| host_data_with_capacity(c.dtype, c.size())).collect();
    source.read_into(index, &mut values)?;
    Ok(Row { values })
}

/// Spans for files holding `counts[k]` examples each, in order.
pub(crate) fn file_spans(paths: &[PathBuf], counts: &[u64]) -> Vec<FileSpan> {
    let mut start = 0;
    paths
        .iter()
        .zip(counts)
        .map(|(path, &count)| {
            let span = FileSpan { path: path.clone(), start, count };
            start += count;
            span
        })
        .collect()
}
