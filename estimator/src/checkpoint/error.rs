//! Checkpoint errors. Each names the object it is about, because "checkpoint corrupted" without the file
//! leaves the user unable to delete or inspect it.

use crate::model_dir::ModelDirError;

pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    ModelDir(#[from] ModelDirError),

    /// The data object cannot be parsed or fails its checksum.
    #[error("checkpoint `{url}` is corrupted: {reason}")]
    Corrupt { url: String, reason: String },

    /// The `checkpoint` state file does not parse; `line` is 1-based, 0 when not about one line.
    #[error("checkpoint state file `{url}`, line {line}: {reason}")]
    StateFile { url: String, line: usize, reason: String },

    #[error("checkpoint `{url}` does not exist")]
    NotFound { url: String },

    #[error("cannot save tensor `{name}`: {reason}")]
    InvalidTensor { name: String, reason: String },

    #[error("cannot encode `{url}`: {reason}")]
    Encode { url: String, reason: String },

    #[error("invalid checkpoint path `{path}`: expected `model.ckpt-<step>` (optionally with `.safetensors`)")]
    InvalidName { path: String },

    #[error("invalid lease holder `{holder}`: use letters, digits, '-', '_' and '.'")]
    InvalidHolder { holder: String },

    /// Another writer kept replacing the state file while we tried to publish (more than one chief?).
    #[error(
        "checkpoint state file `{url}` changed concurrently {attempts} times; is another chief writing to this model dir?"
    )]
    ConcurrentUpdate { url: String, attempts: usize },

    /// Another live process holds the model dir's writer lease (`writer.lock`).
    #[error(
        "this model dir is being trained by {holder}: a second writer would overwrite its checkpoints. Wait for \
         it to finish, or give this run another model dir; if that process is gone for good, delete `{url}`"
    )]
    Locked { url: String, holder: String },

    /// `restore_latest_valid` found checkpoints but could load none of them.
    #[error("no loadable checkpoint in `{dir}`:\n  {}", errors.join("\n  "))]
    NoValidCheckpoint { dir: String, errors: Vec<String> },
}
