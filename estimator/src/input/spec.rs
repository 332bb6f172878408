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
use super::limits::{InputField, MAX_BATCH_SIZE, MAX_PREFETCH, bytes, check_range};
use super::map::Map;
use super::remote;
use super::schema::Schema;
use super::source::csv::CsvOptions;
use super::source::image_folder::ColorMode;
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

/// Keras' default `image_size`.
fn image_size() -> [usize; 2] {
    [256, 256]
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
        /// Required to train and evaluate; prediction reads images only.
        #[serde(default, deserialize_with = "lenient::option")]
        labels: Option<String>,
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
        /// Batches read ahead on a background thread (0: none). Where the process may use
        /// one CPU only, batches are decoded inline whatever this says: a background thread
        /// could only take turns with training there.
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
        /// A column of per-example loss weights (Keras' `sample_weight`).
        #[serde(default, deserialize_with = "lenient::option")]
        weight: Option<String>,
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
    /// A folder with one subfolder of images per class (Keras'
    /// `image_dataset_from_directory`): PNG and JPEG files, decoded to `image_size` in
    /// `color_mode` as values 0 to 255, labelled by their folder's index among the classes.
    /// The other fields are as for `Idx`.
    ImageFolder {
        root: String,
        #[serde(default = "image_size")]
        image_size: [usize; 2],
        #[serde(default)]
        color_mode: ColorMode,
        /// The classes in label order; `None`: the subfolders' names, sorted.
        #[serde(default, deserialize_with = "lenient::option")]
        class_names: Option<Vec<String>>,
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

/// The one feature a map changes, for the maps that change one.
fn map_target(map: &Map) -> Option<&str> {
    match map {
        Map::Normalize { feature, .. }
        | Map::OneHot { feature, .. }
        | Map::Cast { feature, .. }
        | Map::Reshape { feature, .. }
        | Map::RandomFlip { feature, .. }
        | Map::RandomTranslation { feature, .. }
        | Map::RandomBrightness { feature, .. }
        | Map::RandomContrast { feature, .. } => Some(feature),
        Map::Scale(_) | Map::Pack { .. } => None,
    }
}

/// `maps` (Scales and Normalizes) followed by packing `features` (every feature when empty)
/// into `into`, as one per-element `(x - mean) / std` of the packed vector: each element is
/// an affine function of its column's raw value, `a * raw + c`, composed map by map as the
/// pipeline applies them (a `Scale` to float columns only, a `Normalize` to its column,
/// value `i` by `mean[i % n]`), so `mean = -c / a` and `std = 1 / a`.
fn packed_affine(maps: &[Map], schema: &Schema, features: &[String], into: &str) -> Option<Map> {
    let names: Vec<&str> = match features.is_empty() {
        true => schema.features.iter().map(|f| f.name.as_str()).filter(|n| *n != super::SAMPLE_WEIGHT).collect(),
        false => features.iter().map(String::as_str).collect(),
    };
    let (mut mean, mut std) = (Vec::new(), Vec::new());
    for name in names {
        let info = schema.features.iter().find(|f| f.name == name)?;
        let n = info.shape.iter().product::<usize>().max(1);
        let (mut a, mut c) = (vec![1.0f64; n], vec![0.0f64; n]);
        for map in maps {
            match map {
                Map::Scale(d) if info.dtype == engine_graph::DType::F32 => {
                    let d = f64::from(*d);
                    a.iter_mut().zip(&mut c).for_each(|(a, c)| {
                        *a /= d;
                        *c /= d;
                    });
                }
                Map::Normalize { feature, mean: m, std: s }
                    if feature == name && !m.is_empty() && m.len() == s.len() =>
                {
                    for (i, (a, c)) in a.iter_mut().zip(&mut c).enumerate() {
                        let (m, s) = (f64::from(m[i % m.len()]), f64::from(s[i % s.len()]));
                        *a /= s;
                        *c = (*c - m) / s;
                    }
                }
                _ => {}
            }
        }
        for (a, c) in a.into_iter().zip(c) {
            mean.push((-c / a) as f32);
            std.push((1.0 / a) as f32);
        }
    }
    Some(Map::Normalize { feature: into.to_string(), mean, std })
}

impl InputSpec {
    /// The transforms of features a served model can run itself, given the source's schema:
    /// the input's `scale` and its `Scale` and `Normalize` maps when those are all that
    /// change the features (a map of the label alone does not concern a request); and when
    /// they are followed by a `Pack` (a table under a `Sequential` model), the same per
    /// column, composed into one per-element `Normalize` of the packed feature, so that a
    /// request carries the packed columns as the table holds them. `None` when another map
    /// reshapes or retypes features: an export then takes the features after the whole
    /// pipeline, as `predict` feeds them.
    pub fn serving_preprocessing(&self, source: &Schema) -> Option<Vec<Map>> {
        let label = source.label.as_ref().map(|l| l.name.as_str());
        let mut out = Vec::new();
        if let InputSpec::Idx { scale: Some(s), .. } = self
            && *s != 1.0
        {
            out.push(Map::Scale(*s));
        }
        let maps = self.pipeline().maps;
        for (i, map) in maps.iter().enumerate() {
            let target = match map {
                // Training only: a served model sees its requests as they are.
                _ if map.is_augmentation() => continue,
                Map::Scale(_) | Map::Normalize { .. } => {
                    out.push(map.clone());
                    continue;
                }
                Map::Pack { features, into } => {
                    let later_is_label_only =
                        maps[i + 1..].iter().all(|m| map_target(m).is_some_and(|t| Some(t) == label));
                    if !later_is_label_only {
                        return None;
                    }
                    // Nothing to run when the columns reach the model as the table holds them.
                    return packed_affine(&out, source, features, into).map(|n| match &n {
                        Map::Normalize { mean, std, .. }
                            if mean.iter().all(|m| *m == 0.0) && std.iter().all(|s| *s == 1.0) =>
                        {
                            Vec::new()
                        }
                        _ => vec![n],
                    });
                }
                other => map_target(other),
            };
            if target.is_none() || target != label {
                return None;
            }
        }
        Some(out)
    }

    /// Packs a table's columns into the one feature `into` a `Sequential` model reads (see
    /// `Map::Pack`), after the section's own maps, unless one of them packs already. Other
    /// sources keep their features: an image is its own feature already.
    pub fn pack_for_sequential(&mut self, into: &str) {
        if let InputSpec::Csv { maps, .. } = self
            && !maps.iter().any(|m| matches!(m, Map::Pack { .. }))
        {
            maps.push(Map::Pack { features: Vec::new(), into: into.to_string() });
        }
    }

    /// The label column and its vocabulary, when this is a table whose label holds strings
    /// and no vocabulary was given for it (see `CsvOptions::infer_label_vocabulary`).
    pub fn infer_label_vocabulary(&self) -> Result<Option<(String, Vec<String>)>> {
        if let InputSpec::ImageFolder { root, class_names, .. } = self {
            // The classes are names already: the folders'.
            let classes = match class_names {
                Some(names) => names.clone(),
                None => super::source::image_folder::image_folder_classes(std::path::Path::new(root))
                    .map_err(|e| InputError::Field { field: InputField::named("root"), source: Box::new(e) })?,
            };
            return Ok(Some(("label".into(), classes)));
        }
        let InputSpec::Csv { path, label: Some(label), categorical, delimiter, .. } = self else { return Ok(None) };
        let options = CsvOptions {
            path: remote::localize(path)
                .map_err(|e| InputError::Field { field: InputField::named("path"), source: Box::new(e) })?,
            label: Some(label.clone()),
            columns: None,
            weight: None,
            categorical: categorical.clone(),
            delimiter: *delimiter,
        };
        Ok(options.infer_label_vocabulary()?.map(|vocab| (label.clone(), vocab)))
    }

    /// Gives a table's label column this vocabulary (the training table's, so that every
    /// input maps a class to the same index); other sources are left alone.
    pub fn set_label_vocabulary(&mut self, column: &str, vocabulary: &[String]) {
        match self {
            InputSpec::Csv { label: Some(label), categorical, .. } if label == column => {
                categorical.insert(column.to_string(), vocabulary.to_vec());
            }
            InputSpec::ImageFolder { class_names, .. } if column == "label" => {
                *class_names = Some(vocabulary.to_vec());
            }
            _ => {}
        }
    }

    /// Whether the source was given no labels (an `Idx` input written for prediction).
    pub fn lacks_labels(&self) -> bool {
        matches!(self, InputSpec::Idx { labels: None, .. })
    }

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
            | InputSpec::ImageFolder {
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

    /// Opens the source: reads (IDX, CSV) or indexes (TFRecord) its files once. Errors name
    /// the field at fault (`images`, `path`, `label`, `features`), so a spec can report them
    /// at their line.
    pub fn open(&self) -> Result<Dataset> {
        let at = |field: &'static str| {
            move |e: InputError| InputError::Field { field: InputField::named(field), source: Box::new(e) }
        };
        match self {
            InputSpec::Idx { images, labels, .. } => {
                let images = &remote::localize(images).map_err(at("images"))?;
                let labels = &labels.as_deref().map(remote::localize).transpose().map_err(at("labels"))?;
                let opened = match labels {
                    Some(labels) => Dataset::from_idx(images, labels),
                    None => Dataset::from_idx_images(images),
                };
                opened.map_err(|e| {
                    let field = match &e {
                        InputError::Io { path, .. }
                        | InputError::BadIdx { path, .. }
                        | InputError::BadIdxMagic { path, .. }
                            if labels.as_deref().is_some_and(|l| path.as_path() == std::path::Path::new(l)) =>
                        {
                            "labels"
                        }
                        _ => "images",
                    };
                    at(field)(e)
                })
            }
            InputSpec::Csv { path, label, columns, weight, categorical, delimiter, .. } => {
                Dataset::from_csv(CsvOptions {
                    path: remote::localize(path).map_err(at("path"))?,
                    label: label.clone(),
                    columns: columns.clone(),
                    weight: weight.clone(),
                    categorical: categorical.clone(),
                    delimiter: *delimiter,
                })
                .map_err(|e| {
                    let field = match &e {
                        InputError::MissingColumn { column, .. } if label.as_deref() == Some(column) => "label",
                        InputError::MissingColumn { column, .. } if weight.as_deref() == Some(column) => "weight",
                        InputError::MissingColumn { column, .. } if categorical.contains_key(column) => "categorical",
                        InputError::MissingColumn { .. } => "columns",
                        _ => "path",
                    };
                    at(field)(e)
                })
            }
            InputSpec::ImageFolder { root, image_size, color_mode, class_names, .. } => {
                Dataset::from_image_folder(root, *image_size, *color_mode, class_names.as_deref()).map_err(at("root"))
            }
            InputSpec::TfRecord { files, features, label, .. } => {
                let files = remote::localize(files).map_err(at("files"))?;
                Dataset::from_tfrecord(&files, FeatureSpec { features: features.clone(), label: label.clone() })
                    .map_err(at("files"))
            }
            InputSpec::Tensors { features, labels, .. } => {
                Dataset::from_tensors(features.clone(), labels.clone()).map_err(at("features"))
            }
        }
    }

    /// Checks every size against what the machine can hold (see `Resources`) and every map
    /// and filter against the source's schema, naming the field at fault: what `engine plan`
    /// and `engine run` refuse before reading any data.
    pub fn check(&self, source: &Dataset, limits: &crate::Resources) -> Result<()> {
        let p = self.pipeline();
        let mut schema = source.source_schema().clone();
        for (i, map) in p.maps.iter().enumerate() {
            if !map.is_augmentation() && p.maps[..i].iter().any(Map::is_augmentation) {
                return Err(InputError::Field {
                    field: InputField::at("maps", i),
                    source: Box::new(InputError::invalid(
                        "random augmentations (RandomFlip, RandomTranslation, RandomBrightness, RandomContrast) \
                         come after every other map: they run last, on training batches only",
                    )),
                });
            }
            schema = map
                .compile(&schema)
                .map_err(|e| InputError::Field { field: InputField::at("maps", i), source: Box::new(e) })?
                .1;
        }
        for (i, predicate) in p.filters.iter().enumerate() {
            super::filter::Filter::Predicate(predicate.clone())
                .compile(&schema)
                .map_err(|e| InputError::Field { field: InputField::at("filters", i), source: Box::new(e) })?;
        }
        let example: u64 = schema.columns().map(|c| (c.size() * c.dtype.size_bytes()) as u64).sum::<u64>().max(1);
        let budget = limits.max_batches_bytes();
        let memory = format!("(this machine has {} for batches in memory)", bytes(budget));
        check_range("batch_size", p.batch_size as u64, 1, (budget / example).min(MAX_BATCH_SIZE as u64), &memory)?;
        check_range(
            "num_parallel_calls",
            p.num_parallel_calls as u64,
            1,
            limits.max_parallel_calls() as u64,
            &format!("({} cores)", limits.cores),
        )?;
        // Batches in flight: read ahead, being decoded, and the one the step holds.
        let batch = p.batch_size as u64 * example;
        let room = (budget / batch).saturating_sub(p.num_parallel_calls as u64 + 1);
        check_range(
            "prefetch",
            p.prefetch as u64,
            0,
            room.min(MAX_PREFETCH as u64),
            &format!("batches of {} {memory}", bytes(batch)),
        )?;
        // Shuffle buffers hold indices, 8 bytes each.
        check_range("shuffle_buffer", p.shuffle_buffer as u64, 0, limits.memory_bytes / 4 / 8, "(indices in memory)")?;
        if p.cache {
            let all = source.source_len().saturating_mul(example);
            if all > budget {
                let detail = format!(
                    "the decoded data set would take {}, more than {} this machine has for it",
                    bytes(all),
                    bytes(budget)
                );
                return Err(InputError::Field {
                    field: InputField::named("cache"),
                    source: Box::new(InputError::OutOfBounds(detail)),
                });
            }
        }
        Ok(())
    }

    /// The source, sharded for `ctx`, with skip/take, maps, filters and cache: everything
    /// but shuffling and batching.
    fn examples(&self, source: &Dataset, ctx: &InputContext) -> Result<Dataset> {
        let p = self.pipeline();
        if p.batch_size == 0 {
            return Err(InputError::Field {
                field: InputField::named("batch_size"),
                source: Box::new(InputError::OutOfBounds("must be at least 1".into())),
            });
        }
        let mut ds = source.clone();
        if let InputSpec::Idx { scale: Some(s), .. } = self
            && *s != 1.0
        {
            ds = ds.map(Map::Scale(*s));
        }
        ds = ds.shard_by(ctx, p.shard_policy)?;
        if p.skip > 0 {
            ds = ds.skip(p.skip);
        }
        if let Some(n) = p.take {
            ds = ds.take(n);
        }
        for map in p.maps.iter().filter(|m| !m.is_augmentation()) {
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

    /// The section's random augmentations, seeded by its `seed` where they have none: they
    /// run in training only, after the filters and the cache (see `augment`).
    fn augment(&self, mut ds: Dataset) -> Dataset {
        let p = self.pipeline();
        for map in p.maps.iter().filter(|m| m.is_augmentation()) {
            ds = ds.map(map.clone().seeded(p.seed));
        }
        ds
    }

    /// The dataset of input pipeline `ctx.input_pipeline_id`: for training, shuffled,
    /// batched with the agreed steps per epoch, repeated forever; for evaluation, one pass
    /// in exact batches (the last one smaller). Compiled graphs run any batch size and
    /// evaluation has no per-step collective, so no padding is needed: each pipeline
    /// evaluates its own shard and the metric states are merged once at the end.
    pub fn build(&self, mode_is_training: bool, ctx: &InputContext) -> Result<Dataset> {
        self.build_from(&self.open()?, mode_is_training, ctx)
    }

    /// As [`InputSpec::build`], on a source [`InputSpec::open`] returned (a source is read
    /// once, however many datasets are built on it).
    pub fn build_from(&self, source: &Dataset, mode_is_training: bool, ctx: &InputContext) -> Result<Dataset> {
        let p = self.pipeline();
        let mut ds = self.examples(source, ctx)?;
        if mode_is_training {
            ds = self.augment(ds);
            // A folder lists its images class by class: a buffer smaller than the folder
            // mixes only neighbouring classes, and a model trained on such batches learns
            // a few classes at a time (Keras shuffles the whole file list first).
            if let InputSpec::ImageFolder { root, .. } = self
                && (1..source.source_len()).contains(&(p.shuffle_buffer as u64))
                // Once: a job builds its training dataset more than once (to count an
                // epoch's steps, then per input pipeline).
                && crate::once::first_time(&format!("shuffle buffer of {root}"))
            {
                log::warn!(
                    "{root} holds {} images listed class by class, and shuffle_buffer is {}: batches will mix \
                     only neighbouring classes; set shuffle_buffer to {} (it holds 8-byte indices, not images)",
                    source.source_len(),
                    p.shuffle_buffer,
                    source.source_len()
                );
            }
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
        self.examples(&self.open()?, ctx)?.steps_per_epoch(self.batch_size())
    }

    /// Evaluation steps for one pass, the same for every pipeline of `ctx`.
    pub fn eval_steps(&self, ctx: &InputContext) -> Result<u64> {
        self.examples(&self.open()?, ctx)?.eval_steps(self.batch_size())
    }
}
