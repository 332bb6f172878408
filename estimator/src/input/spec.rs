//! The input section of a job spec, embedded in the RON job spec as it is:
//!
//! ```ron
//! Idx(images: "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
//!     labels: "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz",
//!     scale: 255.0, batch_size: 64, shuffle_buffer: 10000, seed: 1)
//! Csv(path: "data/iris.csv", label: "species", categorical: {"species": ["setosa", "versicolor", "virginica"]},
//!     batch_size: 32, shuffle_buffer: 1000)
//! TfRecord(files: "data/train-*.tfrecord", features: {"x": (kind: Float, shape: [4]), "y": (kind: Int64)},
//!     label: "y", batch_size: 32)
//! ```
//!
//! `batch_size` is per replica (Estimator's convention); the global batch is
//! `batch_size * num_replicas_in_sync`. Only the source and `batch_size` are required.
//! Training datasets shuffle (when `shuffle_buffer` > 0), drop each shard's remainder so that
//! every pipeline agrees on the steps of an epoch, and repeat forever; evaluation datasets
//! make one pass in padded, masked batches (see `steps`).

use super::context::{AutoShardPolicy, InputContext};
use super::dataset::Dataset;
use super::error::{InputError, Result};
use super::feature_spec::{FeatureDef, FeatureSpec};
use super::filter::Predicate;
use super::lenient;
use super::map::Map;
use super::source::csv::CsvOptions;
use engine_graph::HostTensor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

fn yes() -> bool {
    true
}

fn two() -> usize {
    2
}

fn one() -> usize {
    1
}

fn comma() -> char {
    ','
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum InputSpec {
    /// IDX images (feature `x`, f32 `[h, w, 1]`) and labels (i64 scalars).
    Idx {
        images: String,
        labels: String,
        /// Pixels are divided by this (`255.0` gives [0, 1]); none when absent.
        #[serde(default, deserialize_with = "lenient::option")]
        scale: Option<f32>,
        /// Per replica.
        batch_size: usize,
        /// Training only; 0 (the default) does not shuffle.
        #[serde(default)]
        shuffle_buffer: usize,
        #[serde(default)]
        seed: u64,
        #[serde(default = "yes")]
        reshuffle_each_iteration: bool,
        #[serde(default)]
        shard_policy: AutoShardPolicy,
        /// Applied in order, after `scale`.
        #[serde(default)]
        maps: Vec<Map>,
        /// Applied after the maps; an example must pass all of them.
        #[serde(default)]
        filters: Vec<Predicate>,
        /// Keeps decoded (and mapped) examples in memory.
        #[serde(default)]
        cache: bool,
        /// Examples of each pipeline's shard to skip, then to take, before maps and filters.
        #[serde(default)]
        skip: u64,
        #[serde(default, deserialize_with = "lenient::option")]
        take: Option<u64>,
        /// Batches read ahead on a background thread (0: none).
        #[serde(default = "two")]
        prefetch: usize,
        /// Threads decoding batches.
        #[serde(default = "one")]
        num_parallel_calls: usize,
    },
    /// CSV with a header; see `CsvOptions`. The other fields are as for `Idx`.
    Csv {
        path: String,
        #[serde(default, deserialize_with = "lenient::option")]
        label: Option<String>,
        #[serde(default, deserialize_with = "lenient::option")]
        columns: Option<Vec<String>>,
        #[serde(default)]
        categorical: BTreeMap<String, Vec<String>>,
        #[serde(default = "comma")]
        delimiter: char,
        batch_size: usize,
        #[serde(default)]
        shuffle_buffer: usize,
        #[serde(default)]
        seed: u64,
        #[serde(default = "yes")]
        reshuffle_each_iteration: bool,
        #[serde(default)]
        shard_policy: AutoShardPolicy,
        #[serde(default)]
        maps: Vec<Map>,
        #[serde(default)]
        filters: Vec<Predicate>,
        #[serde(default)]
        cache: bool,
        #[serde(default)]
        skip: u64,
        #[serde(default, deserialize_with = "lenient::option")]
        take: Option<u64>,
        #[serde(default = "two")]
        prefetch: usize,
        #[serde(default = "one")]
        num_parallel_calls: usize,
    },
    /// TFRecord files of `tf.train.Example` (a path or a glob); see `FeatureSpec`.
    TfRecord {
        files: String,
        features: BTreeMap<String, FeatureDef>,
        #[serde(default, deserialize_with = "lenient::option")]
        label: Option<String>,
        batch_size: usize,
        #[serde(default)]
        shuffle_buffer: usize,
        #[serde(default)]
        seed: u64,
        #[serde(default = "yes")]
        reshuffle_each_iteration: bool,
        #[serde(default)]
        shard_policy: AutoShardPolicy,
        #[serde(default)]
        maps: Vec<Map>,
        #[serde(default)]
        filters: Vec<Predicate>,
        #[serde(default)]
        cache: bool,
        #[serde(default)]
        skip: u64,
        #[serde(default, deserialize_with = "lenient::option")]
        take: Option<u64>,
        #[serde(default = "two")]
        prefetch: usize,
        #[serde(default = "one")]
        num_parallel_calls: usize,
    },
    /// In-memory tensors (Rust only; the first dimension indexes examples).
    #[serde(skip)]
    Tensors {
        features: BTreeMap<String, HostTensor>,
        labels: Option<HostTensor>,
        batch_size: usize,
        shuffle_buffer: usize,
        seed: u64,
        reshuffle_each_iteration: bool,
        shard_policy: AutoShardPolicy,
        maps: Vec<Map>,
        filters: Vec<Predicate>,
        cache: bool,
        skip: u64,
        take: Option<u64>,
        prefetch: usize,
        num_parallel_calls: usize,
    },
}

/// The fields every variant has.
struct Pipeline<'a> {
    batch_size: usize,
    shuffle_buffer: usize,
    seed: u64,
    reshuffle_each_iteration: bool,
    shard_policy: AutoShardPolicy,
    maps: &'a [Map],
    filters: &'a [Predicate],
    cache: bool,
    skip: u64,
    take: Option<u64>,
    prefetch: usize,
    num_parallel_calls: usize,
}

impl InputSpec {
    fn pipeline(&self) -> Pipeline<'_> {
        match self {
            InputSpec::Idx {
                batch_size: b,
                shuffle_buffer: s,
                seed,
                reshuffle_each_iteration: r,
                shard_policy: p,
                maps,
                filters,
                cache,
                skip,
                take,
                prefetch,
                num_parallel_calls: t,
                ..
            }
            | InputSpec::Csv {
                batch_size: b,
                shuffle_buffer: s,
                seed,
                reshuffle_each_iteration: r,
                shard_policy: p,
                maps,
                filters,
                cache,
                skip,
                take,
                prefetch,
                num_parallel_calls: t,
                ..
            }
            | InputSpec::TfRecord {
                batch_size: b,
                shuffle_buffer: s,
                seed,
                reshuffle_each_iteration: r,
                shard_policy: p,
                maps,
                filters,
                cache,
                skip,
                take,
                prefetch,
                num_parallel_calls: t,
                ..
            }
            | InputSpec::Tensors {
                batch_size: b,
                shuffle_buffer: s,
                seed,
                reshuffle_each_iteration: r,
                shard_policy: p,
                maps,
                filters,
                cache,
                skip,
                take,
                prefetch,
                num_parallel_calls: t,
                ..
            } => Pipeline {
                batch_size: *b,
                shuffle_buffer: *s,
                seed: *seed,
                reshuffle_each_iteration: *r,
                shard_policy: *p,
                maps,
                filters,
                cache: *cache,
                skip: *skip,
                take: *take,
                prefetch: *prefetch,
                num_parallel_calls: *t,
            },
        }
    }

    /// A spec for in-memory tensors with every option at its default.
    pub fn tensors(features: BTreeMap<String, HostTensor>, labels: Option<HostTensor>, batch_size: usize) -> Self {
        InputSpec::Tensors {
            features,
            labels,
            batch_size,
            shuffle_buffer: 0,
            seed: 0,
            reshuffle_each_iteration: true,
            shard_policy: AutoShardPolicy::Auto,
            maps: Vec::new(),
            filters: Vec::new(),
            cache: false,
            skip: 0,
            take: None,
            prefetch: two(),
            num_parallel_calls: one(),
        }
    }

    /// The per-replica batch size.
    pub fn batch_size(&self) -> usize {
        self.pipeline().batch_size
    }

    /// The batch of one training step over all replicas.
    pub fn global_batch_size(&self, ctx: &InputContext) -> usize {
        self.batch_size() * ctx.num_replicas_in_sync
    }

    /// The source, sharded for `ctx`, with skip/take, maps, filters and cache: everything
    /// but shuffling and batching.
    fn examples(&self, ctx: &InputContext) -> Result<Dataset> {
        let p = self.pipeline();
        if p.batch_size == 0 {
            return Err(InputError::invalid("batch_size must be at least 1"));
        }
        let mut ds = match self {
            InputSpec::Idx { images, labels, scale, .. } => {
                let ds = Dataset::from_idx(images, labels)?;
                match scale {
                    Some(s) if *s != 1.0 => ds.map(Map::Scale(*s)),
                    _ => ds,
                }
            }
            InputSpec::Csv { path, label, columns, categorical, delimiter, .. } => Dataset::from_csv(CsvOptions {
                path: path.clone(),
                label: label.clone(),
                columns: columns.clone(),
                categorical: categorical.clone(),
                delimiter: *delimiter,
            })?,
            InputSpec::TfRecord { files, features, label, .. } => {
                Dataset::from_tfrecord(files, FeatureSpec { features: features.clone(), label: label.clone() })?
            }
            InputSpec::Tensors { features, labels, .. } => Dataset::from_tensors(features.clone(), labels.clone())?,
        };
        ds = ds.shard_by(ctx, p.shard_policy)?;
        if p.skip > 0 {
            ds = ds.skip(p.skip);
        }
        if let Some(n) = p.take {
            ds = ds.take(n);
        }
        for map in p.maps {
            ds = ds.map(map.clone());
        }
        for predicate in p.filters {
            ds = ds.filter(predicate.clone());
        }
        if p.cache {
            ds = ds.cache();
        }
        Ok(ds)
    }

    /// The dataset of input pipeline `ctx.input_pipeline_id`: for training, shuffled,
    /// batched with the agreed steps per epoch, repeated forever; for evaluation, one pass
    /// in exact batches (the last one smaller). Compiled graphs run any batch size and
    /// evaluation has no per-step collective, so no padding is needed: each pipeline
    /// evaluates its own shard and the metric states are merged once at the end.
    pub fn build(&self, mode_is_training: bool, ctx: &InputContext) -> Result<Dataset> {
        let p = self.pipeline();
        let mut ds = self.examples(ctx)?;
        if mode_is_training {
            if p.shuffle_buffer > 0 {
                ds = ds.shuffle_with(p.shuffle_buffer, p.seed, p.reshuffle_each_iteration);
            }
            ds = ds.batch_for_training(p.batch_size)?.repeat(None);
        } else {
            ds = ds.batch(p.batch_size);
        }
        Ok(ds.prefetch(p.prefetch).num_parallel_calls(p.num_parallel_calls))
    }

    /// Training steps per epoch, the same for every pipeline of `ctx`.
    pub fn steps_per_epoch(&self, ctx: &InputContext) -> Result<u64> {
        self.examples(ctx)?.steps_per_epoch(self.batch_size())
    }

    /// Evaluation steps for one pass, the same for every pipeline of `ctx`.
    pub fn eval_steps(&self, ctx: &InputContext) -> Result<u64> {
        self.examples(ctx)?.eval_steps(self.batch_size())
    }
}
