//! `InputContext` and the auto-shard policies, as `tf.distribute.InputContext` and
//! `tf.data.experimental.AutoShardPolicy` define them.

use super::error::{InputError, Result};
use serde::{Deserialize, Serialize};

/// What an input function needs to know about the distribution: how many pipelines read
/// input (usually one per worker), which one this is, and how many replicas train in sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputContext {
    pub num_input_pipelines: usize,
    pub input_pipeline_id: usize,
    pub num_replicas_in_sync: usize,
}

impl Default for InputContext {
    /// One pipeline feeding one replica: no sharding.
    fn default() -> Self {
        InputContext { num_input_pipelines: 1, input_pipeline_id: 0, num_replicas_in_sync: 1 }
    }
}

impl InputContext {
    pub fn new(num_input_pipelines: usize, input_pipeline_id: usize, num_replicas_in_sync: usize) -> Result<Self> {
        let ctx = InputContext { num_input_pipelines, input_pipeline_id, num_replicas_in_sync };
        ctx.validate()?;
        Ok(ctx)
    }

    pub fn validate(&self) -> Result<()> {
        if self.num_input_pipelines == 0 || self.num_replicas_in_sync == 0 {
            return Err(InputError::Sharding(format!(
                "an input context needs at least one pipeline and one replica, got {self:?}"
            )));
        }
        if self.input_pipeline_id >= self.num_input_pipelines {
            return Err(InputError::Sharding(format!(
                "input_pipeline_id {} is out of range for {} input pipelines",
                self.input_pipeline_id, self.num_input_pipelines
            )));
        }
        Ok(())
    }

    /// The batch each replica gets when the global batch is split evenly, as TensorFlow's
    /// `InputContext.get_per_replica_batch_size`.
    pub fn per_replica_batch_size(&self, global_batch_size: usize) -> Result<usize> {
        if self.num_replicas_in_sync == 0 || !global_batch_size.is_multiple_of(self.num_replicas_in_sync) {
            return Err(InputError::invalid(format!(
                "the global batch size {global_batch_size} is not divisible by num_replicas_in_sync {}",
                self.num_replicas_in_sync
            )));
        }
        Ok(global_batch_size / self.num_replicas_in_sync)
    }

    /// Replicas fed by each pipeline (each pipeline yields this many per-replica batches a step).
    pub fn replicas_per_pipeline(&self) -> Result<usize> {
        self.validate()?;
        if !self.num_replicas_in_sync.is_multiple_of(self.num_input_pipelines) {
            return Err(InputError::Sharding(format!(
                "num_replicas_in_sync {} is not a multiple of num_input_pipelines {}",
                self.num_replicas_in_sync, self.num_input_pipelines
            )));
        }
        Ok(self.num_replicas_in_sync / self.num_input_pipelines)
    }
}

/// How a dataset is split between input pipelines (tf.data's auto-shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AutoShardPolicy {
    /// By file when there are at least as many files as pipelines, else by data.
    #[default]
    Auto,
    /// Pipeline `i` reads files `i, i + n, i + 2n, ...` (in sorted order); an error when
    /// there are fewer files than pipelines.
    File,
    /// Every pipeline reads everything and keeps examples `i, i + n, i + 2n, ...`.
    Data,
    /// Every pipeline sees the whole dataset.
    Off,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_replica_batch_size_divides_or_fails() {
        let ctx = InputContext::new(2, 1, 4).unwrap();
        assert_eq!(ctx.per_replica_batch_size(64).unwrap(), 16);
        let err = ctx.per_replica_batch_size(66).unwrap_err().to_string();
        assert!(err.contains("66") && err.contains('4'), "{err}");
        assert_eq!(ctx.replicas_per_pipeline().unwrap(), 2);
    }

    #[test]
    fn pipeline_id_must_be_in_range() {
        assert!(InputContext::new(2, 2, 2).is_err());
        assert!(InputContext::new(0, 0, 1).is_err());
    }
}
