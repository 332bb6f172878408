//! The passes distribution strategies are made of. A strategy (chosen by name in the
//! estimator) is a list of these: where nodes run, how gradients are combined across
//! replicas, how those combinations are grouped into messages.

mod agree_on_stop;
mod all_reduce_fusion;
mod all_reduce_gradients;
mod all_reduce_loss;
mod all_reduce_updates;
mod central_storage;
mod parameter_server;
mod partition_variables;
mod placement;
mod scale_loss;
mod sync_batch_statistics;

pub use agree_on_stop::{AgreeOnStop, STOP_REQUEST};
pub use all_reduce_fusion::{AllReduceFusion, Bucket, buckets};
pub use all_reduce_gradients::AllReduceGradients;
pub use all_reduce_loss::AllReduceLoss;
pub use all_reduce_updates::AllReduceUpdates;
pub use central_storage::CentralStorage;
pub use parameter_server::{ParameterServerPlacement, transfer_bytes};
pub use partition_variables::{PartitionVariables, Partitioner, shard_rows};
pub use placement::PlaceAll;
pub use scale_loss::ScaleLoss;
pub use sync_batch_statistics::SyncBatchStatistics;
