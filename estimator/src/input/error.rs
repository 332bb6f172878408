//! The one error type of the input pipeline.
//!
//! Malformed input names the file and the line (CSV, 1-based as editors count) or the record
//! (TFRecord, 0-based index within its file, as TensorFlow's tools count), so a user can find
//! the bad bytes without a debugger. Configuration mistakes (an unknown feature in a map, a
//! batch size of zero) are `Invalid`; they are caught when a dataset is compiled into an
//! iterator, before any data is read.

use std::path::PathBuf;

/// `Debug` is the message and its causes (see [`engine_graph::fmt_error_chain`]).
impl std::fmt::Debug for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        engine_graph::fmt_error_chain(self, f)
    }
}

#[derive(thiserror::Error)]
pub enum InputError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("no files match the pattern `{pattern}`")]
    NoFiles { pattern: String },

    #[error("`{pattern}` is not a valid file pattern: {detail}")]
    BadPattern { pattern: String, detail: String },

    #[error("{}: not an IDX file: magic bytes {magic:02x?} (expected 00 00 <type> <ndims>)", path.display())]
    BadIdxMagic { path: PathBuf, magic: [u8; 4] },

    #[error("{}: {detail}", path.display())]
    BadIdx { path: PathBuf, detail: String },

    #[error("{} has {images} examples but {} has {labels} labels", images_path.display(), labels_path.display())]
    LabelCountMismatch { images_path: PathBuf, images: usize, labels_path: PathBuf, labels: usize },

    #[error("{}: record {record} at byte {offset} is truncated: {detail}", path.display())]
    TruncatedRecord { path: PathBuf, record: usize, offset: u64, detail: String },

    #[error(
        "{}: record {record} at byte {offset}: {part} CRC mismatch (stored {stored:#010x}, computed {computed:#010x})",
        path.display()
    )]
    BadCrc { path: PathBuf, record: usize, offset: u64, part: &'static str, stored: u32, computed: u32 },

    #[error("{}: record {record}: malformed tf.Example: {detail}", path.display())]
    BadExample { path: PathBuf, record: usize, detail: String },

    #[error("{}: record {record}: feature `{feature}`: {detail}", path.display())]
    BadFeature { path: PathBuf, record: usize, feature: String, detail: String },

    #[error("{}:{line}: {detail}", path.display())]
    Csv { path: PathBuf, line: usize, detail: String },

    /// An image file of an `ImageFolder` that cannot be decoded or is too large.
    #[error("{}: {detail}", path.display())]
    BadImage { path: PathBuf, detail: String },

    #[error("{}: CSV column `{column}` not found; the header has: {available}", path.display())]
    MissingColumn { path: PathBuf, column: String, available: String },

    /// A value that a map cannot transform (a one-hot index out of range), with the example's
    /// index in its source.
    #[error("example {example}: {detail}")]
    BadValue { example: u64, detail: String },

    #[error("invalid dataset: {0}")]
    Invalid(String),

    /// A size outside what is allowed (the message says the bound and why).
    #[error("{0}")]
    OutOfBounds(String),

    #[error("sharding: {0}")]
    Sharding(String),

    #[error("iterator state does not fit this dataset: {0}")]
    State(String),

    /// What is wrong is the value of one field of an input section (out of bounds, a file
    /// that does not open, a map that does not fit): a spec reports it at that field.
    #[error("{field}: {source}")]
    Field {
        field: super::limits::InputField,
        #[source]
        source: Box<InputError>,
    },

    /// A background decoding thread died; the pipeline cannot continue.
    #[error("input pipeline thread: {0}")]
    Thread(String),
}

impl InputError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        InputError::Io { path: path.into(), source }
    }

    pub(crate) fn invalid(detail: impl Into<String>) -> Self {
        InputError::Invalid(detail.into())
    }
}

pub type Result<T, E = InputError> = std::result::Result<T, E>;
