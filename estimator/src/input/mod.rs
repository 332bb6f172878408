//! The input pipeline: the `input_fn` side of Estimator, as `tf.data` users know it, plus
//! one thing `tf.data` does not do: resume exactly where it stopped.
//!
//! ```no_run
//! use engine_estimator::input::{Dataset, Map};
//! # fn main() -> Result<(), engine_estimator::input::InputError> {
//! let dataset = Dataset::from_idx(
//!     "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
//!     "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz",
//! )?
//! .map(Map::Scale(255.0))
//! .shuffle(10_000, 1)
//! .batch(64)
//! .repeat(None)
//! .prefetch(2);
//! let mut batches = dataset.iter()?;
//! let first = batches.next().transpose()?;
//! let saved = batches.state(); // store it (serde) in the checkpoint ...
//! let resumed = dataset.iter_from(&saved)?; // ... and continue, in this or another process
//! # Ok(()) }
//! ```
//!
//! # Design: a dataset is a function of an index stream
//!
//! Every source is random access by example index (`source`): IDX and in-memory tensors
//! trivially, CSV by parsing the file when opened, TFRecord by indexing record offsets when
//! opened; a glob of files is their concatenation. So the pipeline splits in two:
//!
//! - the *index stream* (`stream`): sharding, shuffle, repeat, take, skip, filter and
//!   batch, all working on source indices. It is cheap, deterministic, and its position
//!   (`IteratorState`) is a few counters plus the indices in shuffle buffers;
//! - *materialization* (`materialize`): decoding each index and applying the maps (and
//!   caches) in order, then assembling the batch. This is the expensive half; it runs on a
//!   bounded pool of decoding threads when `prefetch` or `num_parallel_calls` ask for it.
//!
//! Maps act per example wherever they appear; filters decide on decoded examples but their
//! decisions are part of the index stream.
//!
//! # Sharding and uneven shards
//!
//! `InputContext` and `AutoShardPolicy` follow TensorFlow: `Auto` shards by file when there
//! are at least as many files as pipelines and by data otherwise, `File` refuses to run with
//! fewer files than pipelines, `Data` keeps every n-th example, `Off` gives every pipeline
//! everything. Sharding always applies at the source. Since it is a pure function of the
//! indices, each pipeline can compute every shard's size, and all of them agree on the
//! number of steps without communicating (the rule is in `steps`): training takes the
//! smallest shard's count of full batches per epoch, evaluation the largest shard's count
//! of batches, padded with zero rows that the `mask` feature marks as weight 0.
//!
//! # Exact resumption
//!
//! `DatasetIter::state` is the position after the last batch handed out (with prefetching
//! too: the iterator keeps its own copy of the index stream in step with what it returned).
//! `Dataset::iter_from` in a fresh process continues with exactly the batches an unbroken
//! run would have produced: shuffle seeds derive from (seed, epoch), the random stream's
//! position is a counter, and buffers hold indices.

mod augment;
mod cache;
mod context;
mod dataset;
mod error;
mod example;
mod feature_spec;
mod filter;
mod iter;
mod lenient;
mod limits;
mod map;
mod materialize;
mod prefetch;
mod remote;
mod rng;
mod schema;
mod shard;
mod source;
mod spec;
mod state;
mod steps;
mod stream;
mod wide;

pub use augment::{FillMode, FlipMode};
pub use context::{AutoShardPolicy, InputContext};
pub use dataset::Dataset;
pub use error::{InputError, Result};
pub use example::{Batch, Example, ExampleRef, TensorRef};
pub use feature_spec::{FeatureDef, FeatureKind, FeatureSpec};
pub use filter::{FilterFn, Predicate};
pub use iter::{DatasetIter, IterStats, NonFiniteFinder};
pub use limits::{InputField, MAX_BATCH_SIZE, MAX_PARALLEL_CALLS, MAX_PREFETCH};
pub use map::Map;
pub use source::image_folder::{ColorMode, image_folder_classes};

/// The feature that carries each example's weight in the loss (Keras' `sample_weight`): a
/// table's `weight` column, read under this name, never packed, scaled or served.
pub const SAMPLE_WEIGHT: &str = "sample_weight";
pub use materialize::MASK_FEATURE;
pub use schema::{FeatureInfo, Schema};
pub use source::csv::CsvOptions;
pub use spec::InputSpec;
pub use state::{BufferState, IdBatch, IteratorState, StageState};
