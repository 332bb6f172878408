//! The model directory: where checkpoints, the `checkpoint` state file, leases and event files live.
//!
//! Addressed as TensorFlow users address `model_dir`: a local path or `file://`, `s3://bucket/prefix`, and
//! additionally `memory://name/prefix`, an in-process store shared by name (tests, in-process clusters).
//! All backends go through `object_store`, whose single-object PUT is atomic; that property, plus fsync on
//! the local filesystem, is what the checkpoint layer builds its crash safety on.
//!
//! ```
//! use engine_estimator::model_dir::ModelDir;
//! # fn main() -> Result<(), engine_estimator::model_dir::ModelDirError> {
//! let dir = ModelDir::open("memory://doc-example/run1")?;
//! dir.put("notes/hello.txt", b"hi".to_vec())?;
//! assert_eq!(dir.get("notes/hello.txt")?, b"hi");
//! assert_eq!(dir.list("notes")?.len(), 1);
//! # Ok(()) }
//! ```

mod blocking;
mod dir;
mod error;
mod local_write;
mod location;
mod memory;
mod s3;
#[cfg(test)]
mod tests;

pub use dir::{ModelDir, Object, ObjectInfo, ObjectVersion, PutOutcome};
pub use error::{ModelDirError, Result};
pub use location::Location;
pub use memory::drop_memory_store;
pub use s3::S3Options;
