//! `Dataset`: a source plus a list of stages, composed as with tf.data.
//!
//! Building is infallible and cheap (it records stages); `iter` compiles the list (checking
//! maps against the schema, stage order, sharding) and starts iterating.

use super::cache::CacheStore;
use super::context::{AutoShardPolicy, InputContext};
use super::error::{InputError, Result};
use super::example::ExampleRef;
use super::feature_spec::FeatureSpec;
use super::filter::{Filter, Predicate};
use super::iter::DatasetIter;
use super::map::{CompiledMap, Map};
use super::materialize::{CompiledFilter, ElementStep, EvalOracle, MASK_FEATURE, Materializer};
use super::schema::Schema;
use super::shard::{ShardIds, Sharding};
use super::source::csv::CsvOptions;
use super::source::{Source, csv::CsvSource, idx::IdxSource, tensors::TensorSource, tfrecord::TfRecordSource};
use super::state::{IdBatch, IteratorState};
use super::steps;
use super::stream::batch::BatchStream;
use super::stream::filter::FilterStream;
use super::stream::padded_batch::PaddedBatchStream;
use super::stream::repeat::RepeatStream;
use super::stream::shuffle::ShuffleStream;
use super::stream::source::SourceStream;
use super::stream::take_skip::{SkipStream, TakeStream};
use super::stream::{Item, Stream};
use engine_graph::HostTensor;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

#[derive(Clone)]
enum Op {
    Map(Map),
    Filter(Filter),
    Cache(Arc<CacheStore>),
    Shuffle { buffer: usize, seed: u64, reshuffle: bool },
    Repeat(Option<u64>),
    Take(u64),
    Skip(u64),
    Batch { size: usize, drop_remainder: bool },
    PaddedBatch { size: usize, batches: u64 },
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Map(m) => write!(f, "map({m:?})"),
            Op::Filter(p) => write!(f, "filter({p:?})"),
            Op::Cache(_) => write!(f, "cache"),
            Op::Shuffle { buffer, seed, reshuffle } => {
                write!(f, "shuffle({buffer}, seed={seed}, reshuffle={reshuffle})")
            }
            Op::Repeat(n) => write!(f, "repeat({n:?})"),
            Op::Take(n) => write!(f, "take({n})"),
            Op::Skip(n) => write!(f, "skip({n})"),
            Op::Batch { size, drop_remainder } => write!(f, "batch({size}, drop_remainder={drop_remainder})"),
            Op::PaddedBatch { size, batches } => write!(f, "padded_batch({size}, batches={batches})"),
        }
    }
}

/// A data set and the stages that turn it into batches.
#[derive(Clone)]
pub struct Dataset {
    source: Arc<dyn Source>,
    sharding: Sharding,
    ops: Vec<Op>,
    prefetch: usize,
    threads: usize,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.description())
    }
}

/// Stages after compilation (filters by number, maps moved into the materializer).
#[derive(Debug, Clone)]
enum StreamOp {
    Filter(usize),
    Shuffle { buffer: usize, seed: u64, reshuffle: bool },
    Repeat(Option<u64>),
    Take(u64),
    Skip(u64),
    Batch { size: usize, drop_remainder: bool },
    PaddedBatch { size: usize, batches: u64 },
}

/// A compiled dataset: everything an iterator needs.
pub(crate) struct Plan {
    pub materializer: Arc<Materializer>,
    ops: Vec<StreamOp>,
    pub shard: ShardIds,
    pub sharding: Sharding,
    pub fingerprint: String,
    pub prefetch: usize,
    pub threads: usize,
}

impl Dataset {
    fn from_source(source: impl Source + 'static) -> Self {
        Dataset { source: Arc::new(source), sharding: Sharding::default(), ops: Vec::new(), prefetch: 0, threads: 1 }
    }

    /// IDX images (feature `x`, f32 `[h, w, 1]`) and labels (i64 scalars), raw or gzipped.
    pub fn from_idx(images: impl AsRef<Path>, labels: impl AsRef<Path>) -> Result<Self> {
        Ok(Self::from_source(IdxSource::open(images.as_ref(), Some(labels.as_ref()))?))
    }

    /// IDX images without labels.
    pub fn from_idx_images(images: impl AsRef<Path>) -> Result<Self> {
        Ok(Self::from_source(IdxSource::open(images.as_ref(), None)?))
    }

    /// A folder with one subfolder of images per class (see `ImageFolderSource`); with
    /// `class_names`, exactly those subfolders, in that order.
    pub fn from_image_folder(
        root: impl AsRef<Path>,
        image_size: [usize; 2],
        color_mode: super::ColorMode,
        class_names: Option<&[String]>,
    ) -> Result<Self> {
        Ok(Self::from_source(super::source::image_folder::ImageFolderSource::open(
            root.as_ref(),
            image_size,
            color_mode,
            class_names,
        )?))
    }

    pub fn from_csv(options: CsvOptions) -> Result<Self> {
        Ok(Self::from_source(CsvSource::open(&options)?))
    }

    /// TFRecord files of `tf.train.Example`s (a path or a glob pattern).
    pub fn from_tfrecord(files: &str, spec: FeatureSpec) -> Result<Self> {
        Ok(Self::from_source(TfRecordSource::open(files, &spec)?))
    }

    /// In-memory tensors whose first dimension indexes examples; the label is named `label`.
    pub fn from_tensors(features: BTreeMap<String, HostTensor>, labels: Option<HostTensor>) -> Result<Self> {
        Ok(Self::from_source(TensorSource::new(features, labels)?))
    }

    pub fn map(mut self, map: Map) -> Self {
        self.ops.push(Op::Map(map));
        self
    }

    pub fn filter(mut self, predicate: Predicate) -> Self {
        self.ops.push(Op::Filter(Filter::Predicate(predicate)));
        self
    }

    /// Keeps examples for which `keep` is true; `name` identifies the predicate in the
    /// dataset's fingerprint. `keep` must be a pure function of the example.
    pub fn filter_fn(mut self, name: &str, keep: impl Fn(&ExampleRef<'_>) -> bool + Send + Sync + 'static) -> Self {
        self.ops.push(Op::Filter(Filter::Closure { name: name.to_string(), keep: Arc::new(keep) }));
        self
    }

    /// Keeps decoded examples in memory after their first read (shared by clones).
    pub fn cache(mut self) -> Self {
        self.ops.push(Op::Cache(Arc::new(CacheStore::new(self.source.len()))));
        self
    }

    /// A shuffle buffer of `buffer` elements, reshuffling each epoch.
    pub fn shuffle(self, buffer: usize, seed: u64) -> Self {
        self.shuffle_with(buffer, seed, true)
    }

    pub fn shuffle_with(mut self, buffer: usize, seed: u64, reshuffle_each_iteration: bool) -> Self {
        self.ops.push(Op::Shuffle { buffer, seed, reshuffle: reshuffle_each_iteration });
        self
    }

    /// `Some(n)` passes, or forever.
    pub fn repeat(mut self, count: Option<u64>) -> Self {
        self.ops.push(Op::Repeat(count));
        self
    }

    pub fn take(mut self, n: u64) -> Self {
        self.ops.push(Op::Take(n));
        self
    }

    pub fn skip(mut self, n: u64) -> Self {
        self.ops.push(Op::Skip(n));
        self
    }

    /// Batches of `size`, the last one of a pass possibly short.
    pub fn batch(mut self, size: usize) -> Self {
        self.ops.push(Op::Batch { size, drop_remainder: false });
        self
    }

    pub fn batch_drop_remainder(mut self, size: usize) -> Self {
        self.ops.push(Op::Batch { size, drop_remainder: true });
        self
    }

    /// The same pipeline with `size` rows per batch instead (an elastic job keeps its global
    /// batch as workers come and go, so each worker's share changes). Refused for a padded
    /// batch, whose batch count per pass is part of the pipeline, and for an unbatched one.
    pub fn rebatch(mut self, size: usize) -> Result<Self> {
        let mut found = false;
        for op in &mut self.ops {
            match op {
                Op::Batch { size: s, .. } => {
                    *s = size;
                    found = true;
                }
                Op::PaddedBatch { .. } => {
                    return Err(InputError::invalid(
                        "a padded batch cannot be re-batched: pad to whole batches instead",
                    ));
                }
                _ => {}
            }
        }
        if !found {
            return Err(InputError::invalid("only a batched dataset can be re-batched"));
        }
        Ok(self)
    }

    /// Exactly `batches` batches of `size` rows per pass, padded with zero rows and
    /// carrying a `mask` feature (see the module docs).
    pub fn padded_batch(mut self, size: usize, batches: u64) -> Self {
        self.ops.push(Op::PaddedBatch { size, batches });
        self
    }

    /// Training batches on which every pipeline agrees: `batch_size` per batch, the
    /// remainder of each shard's epoch dropped, every pipeline yielding the same number of
    /// batches per epoch (the smallest shard's). Call before `repeat`.
    pub fn batch_for_training(self, batch_size: usize) -> Result<Self> {
        let batches = self.steps_per_epoch(batch_size)? * self.sharding.replicas_per_pipeline as u64;
        Ok(self.batch_drop_remainder(batch_size).take(batches))
    }

    /// Evaluation batches on which every pipeline agrees: the largest shard's count of
    /// batches, padded and masked so that each example is evaluated exactly once.
    pub fn batch_for_evaluation(self, batch_size: usize) -> Result<Self> {
        let batches = self.eval_steps(batch_size)? * self.sharding.replicas_per_pipeline as u64;
        Ok(self.padded_batch(batch_size, batches))
    }

    /// Rows per batch, if the dataset is batched (the per-replica batch size).
    pub fn batch_size(&self) -> Option<usize> {
        self.ops.iter().rev().find_map(|op| match op {
            Op::Batch { size, .. } | Op::PaddedBatch { size, .. } => Some(*size),
            _ => None,
        })
    }

    /// Batches to read ahead on a background thread.
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches;
        self
    }

    /// Threads decoding batches in parallel (bounded; 1 by default).
    pub fn num_parallel_calls(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Keeps examples `index, index + num, ...` of the source (data sharding).
    pub fn shard(mut self, num: usize, index: usize) -> Self {
        self.sharding = Sharding { num, index, policy: AutoShardPolicy::Data, replicas_per_pipeline: 1 };
        self
    }

    /// Shards by an input context with a policy. Sharding always applies at the source,
    /// whatever its position among the stages, as tf.data's auto-shard rewrite does.
    pub fn shard_by(mut self, ctx: &InputContext, policy: AutoShardPolicy) -> Result<Self> {
        self.sharding = Sharding::from_context(ctx, policy)?;
        Ok(self)
    }

    /// Examples in the source, before sharding and stages.
    pub fn source_len(&self) -> u64 {
        self.source.len()
    }

    /// The source's schema.
    pub fn source_schema(&self) -> &Schema {
        self.source.schema()
    }

    /// The schema of the examples in batches (after maps; with `mask` when padded).
    pub fn schema(&self) -> Result<Schema> {
        let plan = self.compile()?;
        let mut schema = plan.materializer.schema.clone();
        if plan.materializer.padded {
            schema.features.push(super::schema::FeatureInfo::new(MASK_FEATURE, engine_graph::DType::F32, vec![]));
        }
        Ok(schema)
    }

    /// Iterates from the start.
    pub fn iter(&self) -> Result<DatasetIter> {
        let plan = self.compile()?;
        let stream = plan.build_stream()?;
        DatasetIter::start(plan, stream, 0)
    }

    /// Iterates from a saved position (possibly saved by another process).
    pub fn iter_from(&self, state: &IteratorState) -> Result<DatasetIter> {
        let plan = self.compile()?;
        if (state.num_shards, state.shard_index) != (plan.sharding.num, plan.sharding.index) {
            return Err(InputError::State(format!(
                "the state is of input pipeline {} of {}, this dataset is pipeline {} of {}",
                state.shard_index, state.num_shards, plan.sharding.index, plan.sharding.num
            )));
        }
        if state.fingerprint != plan.fingerprint {
            return Err(InputError::State(format!(
                "it was saved for dataset {}, this is dataset {} ({})",
                state.fingerprint,
                plan.fingerprint,
                self.description()
            )));
        }
        let mut stream = plan.build_stream()?;
        let mut stages = state.stages.iter();
        stream.load(&mut stages)?;
        if stages.next().is_some() {
            return Err(InputError::State("more stage states than stages".into()));
        }
        DatasetIter::start(plan, stream, state.batches)
    }

    /// Iterates from batch `batches`, found by replaying the index streams (no decoding,
    /// except for filters): a way to resume knowing only how many batches were consumed,
    /// e.g. from the global step, when no iterator state was saved.
    pub fn iter_after(&self, batches: u64) -> Result<DatasetIter> {
        let plan = self.compile()?;
        let mut stream = plan.build_stream()?;
        let mut oracle = EvalOracle::new(plan.materializer.clone(), false);
        for _ in 0..batches {
            if stream.next(&mut oracle)?.is_none() {
                break;
            }
        }
        DatasetIter::start(plan, stream, batches)
    }

    /// Examples per pass in each pipeline's shard, after filters, take and skip (every
    /// pipeline can compute every shard: sharding is a function of the indices).
    pub fn shard_sizes(&self) -> Result<Vec<u64>> {
        let plan = self.compile()?;
        let element_ops: Vec<&StreamOp> = plan
            .ops
            .iter()
            .take_while(|op| !matches!(op, StreamOp::Batch { .. } | StreamOp::PaddedBatch { .. }))
            .collect();
        if element_ops.iter().any(|op| matches!(op, StreamOp::Repeat(_))) {
            return Err(InputError::invalid(
                "shard sizes count one pass over the data; this dataset repeats before batching",
            ));
        }
        let only_reorders = element_ops.iter().all(|op| matches!(op, StreamOp::Shuffle { .. }));
        (0..plan.sharding.num)
            .map(|k| {
                let ids = ShardIds::resolve(self.source.files(), self.source.len(), &plan.sharding.for_index(k))?;
                if only_reorders {
                    return Ok(ids.len());
                }
                let mut stream = build_element_stream(ids, element_ops.iter().copied())?;
                let mut oracle = EvalOracle::new(plan.materializer.clone(), false);
                let mut count = 0;
                while stream.next(&mut oracle)?.is_some() {
                    count += 1;
                }
                Ok(count)
            })
            .collect()
    }

    /// Training steps per epoch every pipeline agrees on (see the module docs).
    pub fn steps_per_epoch(&self, batch_size: usize) -> Result<u64> {
        steps::train_steps_per_epoch(&self.shard_sizes()?, batch_size, self.sharding.replicas_per_pipeline)
    }

    /// Evaluation steps every pipeline agrees on (see the module docs).
    pub fn eval_steps(&self, batch_size: usize) -> Result<u64> {
        steps::eval_steps(&self.shard_sizes()?, batch_size, self.sharding.replicas_per_pipeline)
    }

    fn description(&self) -> String {
        format!("{} | shard {:?} | {:?}", self.source.describe(), self.sharding, self.ops)
    }

    pub(crate) fn compile(&self) -> Result<Plan> {
        let mut schema = self.source.schema().clone();
        let mut steps = Vec::new();
        let mut filters = Vec::new();
        let mut ops = Vec::new();
        let mut augments = Vec::new();
        let mut batched = false;
        let mut padded = false;
        for op in &self.ops {
            let element_level = matches!(op, Op::Filter(_));
            if batched && element_level {
                return Err(InputError::invalid(format!("{op:?} after batching: filter before `batch`")));
            }
            // Augmentations draw by the example's place in its batch, so they run on the
            // batch being assembled, after everything else an example goes through: a
            // cache must not keep one draw, nor a filter decide on one.
            let after_augment =
                matches!(op, Op::Map(m) if !m.is_augmentation()) || matches!(op, Op::Filter(_) | Op::Cache(_));
            if after_augment && !augments.is_empty() {
                return Err(InputError::invalid(format!(
                    "{op:?} after a random augmentation: augmentations come after every other map, filter and cache"
                )));
            }
            match op {
                Op::Map(map) => {
                    let (compiled, next) = map.compile(&schema)?;
                    match compiled {
                        CompiledMap::Augment(augment) => {
                            augments.push(augment.reseed(augments.len(), self.sharding.index))
                        }
                        compiled => steps.push(ElementStep::Map(compiled)),
                    }
                    schema = next;
                }
                Op::Cache(store) => steps.push(ElementStep::Cache(store.clone())),
                Op::Filter(filter) => {
                    filter.compile(&schema)?;
                    ops.push(StreamOp::Filter(filters.len()));
                    filters.push(CompiledFilter {
                        prefix: steps.len(),
                        filter: filter.clone(),
                        schema: schema.clone(),
                    });
                }
                &Op::Shuffle { buffer, seed, reshuffle } => {
                    if buffer == 0 {
                        return Err(InputError::invalid("a shuffle buffer needs at least one element"));
                    }
                    ops.push(StreamOp::Shuffle { buffer, seed, reshuffle });
                }
                &Op::Repeat(n) => ops.push(StreamOp::Repeat(n)),
                &Op::Take(n) => ops.push(StreamOp::Take(n)),
                &Op::Skip(n) => ops.push(StreamOp::Skip(n)),
                &Op::Batch { size, .. } | &Op::PaddedBatch { size, .. } => {
                    if batched {
                        return Err(InputError::invalid("a dataset can be batched once"));
                    }
                    if size == 0 {
                        return Err(InputError::invalid("batch size must be at least 1"));
                    }
                    batched = true;
                    ops.push(match *op {
                        Op::PaddedBatch { batches, .. } => {
                            padded = true;
                            StreamOp::PaddedBatch { size, batches }
                        }
                        _ => StreamOp::Batch {
                            size,
                            drop_remainder: matches!(op, Op::Batch { drop_remainder: true, .. }),
                        },
                    });
                }
            }
        }
        if !batched {
            ops.push(StreamOp::Batch { size: 1, drop_remainder: false });
        }
        // Ceilings whatever the machine (a spec's input is held to tighter, memory-derived
        // bounds by `InputSpec::check`): past them, channel and buffer allocations abort.
        if self.prefetch > super::limits::MAX_PREFETCH || self.threads > super::limits::MAX_PARALLEL_CALLS {
            return Err(InputError::invalid(format!(
                "prefetch {} and num_parallel_calls {} must stay within {} and {}",
                self.prefetch,
                self.threads,
                super::limits::MAX_PREFETCH,
                super::limits::MAX_PARALLEL_CALLS
            )));
        }
        if let Some(StreamOp::Batch { size, .. } | StreamOp::PaddedBatch { size, .. }) =
            ops.iter().find(|op| matches!(op, StreamOp::Batch { .. } | StreamOp::PaddedBatch { .. }))
            && *size > super::limits::MAX_BATCH_SIZE
        {
            return Err(InputError::invalid(format!(
                "batch size {size} is more than {}",
                super::limits::MAX_BATCH_SIZE
            )));
        }
        if padded && schema.columns().any(|c| c.name == MASK_FEATURE) {
            return Err(InputError::invalid(format!(
                "padded batches add a `{MASK_FEATURE}` feature; the dataset already has one"
            )));
        }
        let shard = ShardIds::resolve(self.source.files(), self.source.len(), &self.sharding)?;
        let materializer =
            Arc::new(Materializer { source: self.source.clone(), steps, filters, schema, padded, augments });
        Ok(Plan {
            materializer,
            ops,
            shard,
            sharding: self.sharding,
            fingerprint: fingerprint(&self.description()),
            prefetch: self.prefetch,
            threads: self.threads,
        })
    }
}

impl Plan {
    /// A fresh index stream, positioned at the start.
    pub fn build_stream(&self) -> Result<Box<dyn Stream<IdBatch>>> {
        let split = self.ops.iter().position(|op| matches!(op, StreamOp::Batch { .. } | StreamOp::PaddedBatch { .. }));
        let Some(split) = split else {
            return Err(InputError::invalid("internal: a compiled dataset has no batch stage"));
        };
        let elements = build_element_stream(self.shard.clone(), self.ops[..split].iter())?;
        let mut stream: Box<dyn Stream<IdBatch>> = match self.ops[split] {
            StreamOp::Batch { size, drop_remainder } => Box::new(BatchStream::new(elements, size, drop_remainder)),
            StreamOp::PaddedBatch { size, batches } => Box::new(PaddedBatchStream::new(elements, size, batches)),
            _ => return Err(InputError::invalid("internal: split at a non-batch stage")),
        };
        for op in &self.ops[split + 1..] {
            stream = wrap(stream, op)?;
        }
        Ok(stream)
    }
}

fn build_element_stream<'a>(ids: ShardIds, ops: impl Iterator<Item = &'a StreamOp>) -> Result<Box<dyn Stream<u64>>> {
    let mut stream: Box<dyn Stream<u64>> = Box::new(SourceStream::new(ids));
    for op in ops {
        stream = match op {
            &StreamOp::Filter(k) => Box::new(FilterStream::new(stream, k)),
            other => wrap(stream, other)?,
        };
    }
    Ok(stream)
}

/// Wraps a stream of any item in an item-agnostic stage.
fn wrap<T: Item>(upstream: Box<dyn Stream<T>>, op: &StreamOp) -> Result<Box<dyn Stream<T>>> {
    Ok(match *op {
        StreamOp::Shuffle { buffer, seed, reshuffle } => {
            Box::new(ShuffleStream::new(upstream, buffer, seed, reshuffle))
        }
        StreamOp::Repeat(n) => Box::new(RepeatStream::new(upstream, n)),
        StreamOp::Take(n) => Box::new(TakeStream::new(upstream, n)),
        StreamOp::Skip(n) => Box::new(SkipStream::new(upstream, n)),
        ref other => return Err(InputError::invalid(format!("internal: {other:?} cannot apply here"))),
    })
}

/// FNV-1a: a hash that is the same in every process and Rust version (unlike `std`'s).
fn fingerprint(description: &str) -> String {
    let hash =
        description.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("{hash:016x}")
}
