//! Summary errors, each naming the event file or the tag concerned.

use crate::model_dir::ModelDirError;
use std::path::PathBuf;

pub type Result<T, E = SummaryError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error(transparent)]
    ModelDir(#[from] ModelDirError),

    #[error("{op} event file `{}`: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("invalid summary tag `{tag}`: tags must be non-empty")]
    InvalidTag { tag: String },

    /// TensorFlow's histogram op refuses NaN and infinities too: they have no bucket.
    #[error("histogram `{tag}` at step {step}: {count} non-finite value(s)")]
    NonFinite { tag: String, step: u64, count: usize },

    /// A damaged record in an event file being read back.
    #[error("event file `{url}`, record {record} at byte {offset}: {reason}")]
    Record { url: String, record: usize, offset: usize, reason: String },
}
