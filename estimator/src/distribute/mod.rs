//! Custom training loops under any strategy: TensorFlow's `strategy.run` workflow.
//!
//! The Estimator owns its loop; this module gives the loop to the user, as the seed's
//! custom-training-loop tutorial does with `tf.distribute`:
//!
//! | TensorFlow | here |
//! |---|---|
//! | `tf.distribute.MultiWorkerMirroredStrategy()` | [`DistributionStrategy::new`]`(StrategyKind::MultiWorker)` |
//! | `strategy.distribute_datasets_from_function(fn)` | [`DistributionStrategy::distribute_datasets_from_function`] |
//! | `@tf.function def train_step` + `strategy.run(step_fn, args)` | [`DistributionStrategy::compile_step`] once, then [`DistributionStrategy::run`] |
//! | `strategy.reduce(SUM, per_replica_losses, axis=None)` | [`DistributionStrategy::reduce`]`(ReduceOp::Sum, &out.losses())` |
//! | `train_accuracy.result()`, `reset_states()` | [`DistributionStrategy::metrics`], [`Step::reset_metrics`] |
//! | `tf.train.CheckpointManager(checkpoint, dir, max_to_keep)` | [`DistributionStrategy::checkpoint_manager`] |
//! | `tf.summary.create_file_writer` on the chief | [`DistributionStrategy::summary_writer`] |
//!
//! A step is the model function's training graph (model, loss, optimizer, metrics) compiled
//! once with the strategy's passes, so what runs is what `engine plan` shows: the all-reduces
//! `mirrored` and `multi_worker` insert, the placement of `central_storage`, the ps
//! partitions of `parameter_server`. The loop body is the same under every strategy; see
//! `examples/custom_loop_multi_worker.rs`.

mod checkpoint;
mod dataset;
mod per_replica;
mod step;
mod strategy;
mod summaries;

pub use checkpoint::{LoopCheckpointManager, LoopState};
pub use dataset::{DistributedDataset, DistributedIterator};
pub use engine_graph::ops::ReduceOp;
pub use per_replica::PerReplica;
pub use step::{Step, StepOutput};
pub use strategy::{CLUSTER_TOKEN_ENV, DistributionStrategy};
pub use summaries::LoopSummaries;
