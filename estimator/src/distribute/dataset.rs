//! `strategy.distribute_datasets_from_function`: this process's input pipeline, split into
//! one batch per local replica.

use super::{LoopState, PerReplica};
use crate::{
    EstimatorError, Result,
    input::{Batch, Dataset, DatasetIter, InputContext, IteratorState, Schema},
};

/// The dataset an input function made for this process's pipeline. Each step takes one
/// per-replica batch for every local replica, in order, as the Estimator's loop does: with
/// `mirrored` over two devices, replica 0 gets batches 0, 2, 4, ... of the pipeline.
pub struct DistributedDataset {
    dataset: Dataset,
    context: InputContext,
    replicas: usize,
}

impl DistributedDataset {
    pub(crate) fn new(dataset: Dataset, context: InputContext, replicas: usize) -> Self {
        DistributedDataset { dataset, context, replicas }
    }

    /// The input context the function was called with.
    pub fn input_context(&self) -> InputContext {
        self.context
    }

    /// What a batch holds: the placeholders a step is compiled with.
    pub fn schema(&self) -> Result<Schema> {
        Ok(self.dataset.schema()?)
    }

    /// Rows in each replica's batch (the first batch's, for a dataset batched unevenly).
    pub fn per_replica_batch_size(&self) -> Option<usize> {
        self.dataset.batch_size()
    }

    /// The dataset of this pipeline, as the input function returned it.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// A pass from the start (Python's `iter(dataset)`).
    pub fn iter(&self) -> Result<DistributedIterator> {
        Ok(self.wrap(self.dataset.iter()?))
    }

    /// Continues where an iterator of this dataset was when `state` was taken (its
    /// [`DistributedIterator::state`], saved with a checkpoint).
    pub fn iter_from(&self, state: &IteratorState) -> Result<DistributedIterator> {
        Ok(self.wrap(self.dataset.iter_from(state)?))
    }

    /// Where the loop left off in `state`'s checkpoint: at the saved position when this
    /// task saved it (the chief), after as many batches when another task's shard saved it
    /// (every pipeline is at the same batch), from the start when no position was saved.
    pub fn iter_resumed(&self, state: &LoopState) -> Result<DistributedIterator> {
        let Some(saved) = &state.input else { return self.iter() };
        let ctx = self.context;
        if (saved.num_shards, saved.shard_index) == (ctx.num_input_pipelines, ctx.input_pipeline_id) {
            return self.iter_from(saved);
        }
        if saved.num_shards != ctx.num_input_pipelines {
            return Err(EstimatorError::Other(format!(
                "checkpoint {} saved the input position of {} input pipelines, this job has {}: restart the epoch \
                 with iter() instead",
                state.path, saved.num_shards, ctx.num_input_pipelines
            )));
        }
        Ok(self.wrap(self.dataset.iter_after(saved.batches)?))
    }

    fn wrap(&self, inner: DatasetIter) -> DistributedIterator {
        DistributedIterator { inner, replicas: self.replicas }
    }
}

/// Yields one [`PerReplica`] batch per step; `None` once the pipeline cannot fill every
/// local replica (a partial step would give replicas unequal work and the job a smaller
/// global batch than it was compiled for).
pub struct DistributedIterator {
    inner: DatasetIter,
    replicas: usize,
}

impl DistributedIterator {
    /// The position after the last batch handed out, for a checkpoint.
    pub fn state(&self) -> IteratorState {
        self.inner.state()
    }

    /// The next step's batches (Python's `next(iterator)`).
    pub fn next_batch(&mut self) -> Result<Option<PerReplica<Batch>>> {
        let mut batches = Vec::with_capacity(self.replicas);
        for _ in 0..self.replicas {
            match self.inner.next() {
                Some(batch) => batches.push(batch?),
                None => return Ok(None),
            }
        }
        Ok(Some(PerReplica(batches)))
    }

    /// The next step's batches, or an error saying the input ended (for loops that count
    /// steps per epoch, as the seed's does).
    pub fn expect_batch(&mut self) -> Result<PerReplica<Batch>> {
        self.next_batch()?.ok_or_else(|| {
            EstimatorError::Other(format!(
                "the input ended after {} batches: it cannot fill the step (repeat the dataset, or count fewer \
                 steps per epoch)",
                self.inner.state().batches
            ))
        })
    }
}

impl Iterator for DistributedIterator {
    type Item = Result<PerReplica<Batch>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}
