//! The one error type of the model directory: every variant names the URL or path it is about, because a
//! training job typically touches several stores (local scratch, S3 model dir, a warm-start source) and an
//! error without its location is useless.

use std::path::PathBuf;

pub type Result<T, E = ModelDirError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ModelDirError {
    #[error(
        "model dir `{location}`: unsupported scheme `{scheme}://` (expected a local path, file://, memory:// or s3://)"
    )]
    UnsupportedScheme { location: String, scheme: String },

    #[error("model dir `{location}`: {reason}")]
    InvalidLocation { location: String, reason: String },

    #[error("model dir `{location}`: invalid object name `{name}`: {reason}")]
    InvalidName { location: String, name: String, reason: String },

    #[error("model dir `{location}`: cannot configure the S3 client: {source}")]
    S3Config {
        location: String,
        #[source]
        source: object_store::Error,
    },

    #[error("`{url}` does not exist")]
    NotFound { url: String },

    /// A failed request to the object store; `op` is the operation (`put`, `get`, `list`, ...).
    #[error("{op} `{url}`: {source}")]
    Store {
        op: &'static str,
        url: String,
        #[source]
        source: object_store::Error,
    },

    #[error("{op} `{}`: {source}", path.display())]
    LocalIo {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot start the I/O runtime of the model dir: {source}")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
}

impl ModelDirError {
    /// True for errors where retrying the same request may succeed (network trouble, throttling), as
    /// opposed to a bad location or a missing object.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelDirError::Store { source, .. } => !matches!(
                source,
                object_store::Error::NotFound { .. }
                    | object_store::Error::InvalidPath { .. }
                    | object_store::Error::NotSupported { .. }
                    | object_store::Error::NotImplemented { .. }
                    | object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
                    | object_store::Error::UnknownConfigurationKey { .. }
            ),
            ModelDirError::LocalIo { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ),
            _ => false,
        }
    }
}
