//! Checkpoints in a model dir: safetensors data objects, TensorFlow's `checkpoint` state file, atomic
//! publishing, retention, leases and garbage collection.
//!
//! Layout of a model dir after a few saves with `keep_checkpoint_max = 2`:
//! ```text
//! checkpoint                          state file: latest + kept, TensorFlow's text format
//! model.ckpt-200.safetensors          every variable, slot and global_step, + metadata
//! model.ckpt-300.safetensors
//! leases/model.ckpt-300.evaluator-0.json   an evaluator reading it (GC waits)
//! preserved/model.ckpt-100.json       kept for good by keep_checkpoint_every_n_hours
//! ```
//!
//! ```
//! use engine_estimator::checkpoint::{CheckpointManager, CheckpointMeta};
//! use engine_estimator::model_dir::ModelDir;
//! use engine_graph::HostTensor;
//! use std::collections::BTreeMap;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = CheckpointManager::new(ModelDir::open("memory://ckpt-doc/run")?, 5, None);
//! let mut variables = BTreeMap::new();
//! variables.insert("dense/kernel".to_string(), HostTensor::f32(vec![2], vec![0.5, -1.0])?);
//! variables.insert("global_step".to_string(), HostTensor::scalar_i64(100));
//! manager.save(100, &variables, &CheckpointMeta { fingerprint: "job-1".into(), input_state: "{}".into(), examples_seen: None })?;
//! let restored = manager.restore_latest_valid()?.ok_or("no checkpoint")?;
//! assert_eq!(restored.checkpoint.step, 100);
//! assert_eq!(restored.checkpoint.tensors, variables);
//! # Ok(()) }
//! ```

mod error;
pub(crate) mod format;
mod gc;
mod inventory;
mod lease;
mod manager;
mod name;
mod restore;
mod retention;
mod state_file;
mod writer_lock;

pub use error::{CheckpointError, Result};
pub use format::{Checkpoint, CheckpointMeta};
pub use inventory::{CheckpointStatus, Inventory, InventoryEntry};
pub(crate) use lease::unix_now;
pub use lease::{Lease, LeaseInfo};
pub use manager::{CheckpointInfo, CheckpointManager, GcReport};
pub use name::{CHECKPOINT_BASENAME, DATA_SUFFIX, STATE_FILE, checkpoint_name, data_object_name, parse_step};
pub use restore::{RestoredCheckpoint, read_checkpoint};
pub use retention::RetentionPolicy;
pub use state_file::CheckpointState;
pub use writer_lock::{WRITER_LOCK, WriterLock};
