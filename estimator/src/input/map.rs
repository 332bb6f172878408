//! Per-example transformations, checked against the schema before any data is read.
//!
//! They act on one example at a time wherever they appear in a pipeline (before or after
//! `batch`); each of them gives the same batch either way, and keeping them per example lets
//! them run on the decoding threads.

use super::SAMPLE_WEIGHT;
use super::augment::{CompiledAugment, FillMode, FlipMode, Request};
use super::error::{InputError, Result};
use super::schema::{Row, Schema};
use engine_graph::{DType, HostData};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Map {
    /// Divides every f32 feature (not the label, nor the examples' weights) by this:
    /// `Scale(255.0)` takes pixels to [0, 1].
    Scale(f32),
    /// `(x - mean) / std`; `mean` and `std` hold one value, one per element of the last
    /// dimension (per channel), or one per element.
    Normalize { feature: String, mean: Vec<f32>, std: Vec<f32> },
    /// i64 class ids to f32 one-hot vectors: shape `s` becomes `s + [depth]`.
    OneHot { feature: String, depth: usize },
    /// Converts the element type (f32 to i64 truncates toward zero).
    Cast { feature: String, dtype: DType },
    /// Same elements, another per-example shape.
    Reshape { feature: String, shape: Vec<usize> },
    /// Concatenates features (each flattened, as f32: class ids and booleans become their
    /// numbers) into one vector feature `into`, in the listed order, or in the dataset's
    /// column order when `features` is empty: how a `Sequential` model reads a table.
    Pack {
        #[serde(default)]
        features: Vec<String>,
        into: String,
    },
    /// Flips an image left to right (`Horizontal`), upside down (`Vertical`), or each with
    /// its own draw (`HorizontalAndVertical`, the default), each with probability one half.
    /// This and the three maps below augment: see `augment` for when they run (training
    /// only, after every other map, filter and cache) and where their draws come from
    /// (`seed`, else the input section's).
    RandomFlip {
        feature: String,
        #[serde(default)]
        mode: FlipMode,
        #[serde(default, deserialize_with = "super::lenient::option")]
        seed: Option<u64>,
    },
    /// Shifts an image by up to `height_factor` of its height and `width_factor` of its
    /// width each way, in whole pixels, filling what comes into the frame per `fill_mode`.
    RandomTranslation {
        feature: String,
        height_factor: f32,
        width_factor: f32,
        #[serde(default)]
        fill_mode: FillMode,
        #[serde(default)]
        fill_value: f32,
        #[serde(default, deserialize_with = "super::lenient::option")]
        seed: Option<u64>,
    },
    /// Adds one draw from `[-factor, factor]` times the width of `value_range` to every
    /// value, then clips to `value_range` (Keras' default `(0, 255)`: pass `(0.0, 1.0)`
    /// after `Scale(255.0)`).
    RandomBrightness {
        feature: String,
        factor: f32,
        #[serde(default = "pixel_range")]
        value_range: [f32; 2],
        #[serde(default, deserialize_with = "super::lenient::option")]
        seed: Option<u64>,
    },
    /// Scales each channel's distance from its mean by one draw from `[1 - factor, 1 +
    /// factor]`, then clips to `value_range`.
    RandomContrast {
        feature: String,
        factor: f32,
        #[serde(default = "pixel_range")]
        value_range: [f32; 2],
        #[serde(default, deserialize_with = "super::lenient::option")]
        seed: Option<u64>,
    },
}

/// Keras' default `value_range` of its random image layers.
fn pixel_range() -> [f32; 2] {
    [0.0, 255.0]
}

/// A map resolved against a schema: column positions instead of names.
#[derive(Debug, Clone)]
pub(crate) enum CompiledMap {
    Scale {
        columns: Vec<usize>,
        divisor: f32,
    },
    Normalize {
        column: usize,
        mean: Vec<f32>,
        std: Vec<f32>,
    },
    OneHot {
        column: usize,
        depth: usize,
        name: String,
    },
    Cast {
        column: usize,
        dtype: DType,
    },
    Reshape,
    /// Columns in packing order; the packed vector replaces the first column of the
    /// schema order and the others are removed.
    Pack {
        columns: Vec<usize>,
    },
    /// A random augmentation, seeded by its own `seed` only until the dataset gives it its
    /// stream (`CompiledAugment::reseed`).
    Augment(CompiledAugment),
}

impl Map {
    /// Whether this is a random augmentation (training only, after every other map).
    pub fn is_augmentation(&self) -> bool {
        matches!(
            self,
            Map::RandomFlip { .. }
                | Map::RandomTranslation { .. }
                | Map::RandomBrightness { .. }
                | Map::RandomContrast { .. }
        )
    }

    /// An augmentation without a seed of its own takes `seed` (the input section's).
    pub(crate) fn seeded(mut self, section: u64) -> Self {
        if let Map::RandomFlip { seed, .. }
        | Map::RandomTranslation { seed, .. }
        | Map::RandomBrightness { seed, .. }
        | Map::RandomContrast { seed, .. } = &mut self
        {
            seed.get_or_insert(section);
        }
        self
    }

    /// Resolves the map against the schema it will see, and gives the schema after it.
    pub(crate) fn compile(&self, schema: &Schema) -> Result<(CompiledMap, Schema)> {
        let mut out = schema.clone();
        let invalid = |feature: &str, detail: String| InputError::invalid(format!("{self:?} on `{feature}`: {detail}"));
        let compiled = match self {
            Map::Scale(divisor) => {
                if *divisor == 0.0 || !divisor.is_finite() {
                    return Err(InputError::invalid(format!(
                        "Scale({divisor}) must divide by a finite non-zero number"
                    )));
                }
                let columns = (0..schema.features.len())
                    .filter(|&i| schema.features[i].dtype == DType::F32 && schema.features[i].name != SAMPLE_WEIGHT)
                    .collect();
                CompiledMap::Scale { columns, divisor: *divisor }
            }
            Map::Normalize { feature, mean, std } => {
                let column = schema.index_of(feature)?;
                let info = &schema.column(column).ok_or_else(|| invalid(feature, "no such column".into()))?;
                if info.dtype != DType::F32 {
                    return Err(invalid(feature, format!("needs an f32 feature, this one is {}", info.dtype)));
                }
                let last = info.shape.last().copied().unwrap_or(1);
                let fits = |n: usize| n == 1 || n == last || n == info.size();
                if mean.len() != std.len() || !fits(mean.len()) {
                    return Err(invalid(
                        feature,
                        format!(
                            "mean ({}) and std ({}) must have the same length: 1, {last} (per channel) or {} (per element)",
                            mean.len(),
                            std.len(),
                            info.size()
                        ),
                    ));
                }
                if std.iter().any(|&s| s == 0.0 || !s.is_finite()) {
                    return Err(invalid(feature, "std must be finite and non-zero".into()));
                }
                CompiledMap::Normalize { column, mean: mean.clone(), std: std.clone() }
            }
            Map::OneHot { feature, depth } => {
                let column = schema.index_of(feature)?;
                let col = out.column_mut(column).ok_or_else(|| invalid(feature, "no such column".into()))?;
                if col.dtype != DType::I64 {
                    return Err(invalid(feature, format!("needs i64 class ids, this feature is {}", col.dtype)));
                }
                if *depth == 0 {
                    return Err(invalid(feature, "depth must be at least 1".into()));
                }
                col.dtype = DType::F32;
                col.shape.push(*depth);
                CompiledMap::OneHot { column, depth: *depth, name: feature.clone() }
            }
            Map::Cast { feature, dtype } => {
                let column = schema.index_of(feature)?;
                let col = out.column_mut(column).ok_or_else(|| invalid(feature, "no such column".into()))?;
                col.dtype = *dtype;
                CompiledMap::Cast { column, dtype: *dtype }
            }
            Map::Reshape { feature, shape } => {
                let column = schema.index_of(feature)?;
                let col = out.column_mut(column).ok_or_else(|| invalid(feature, "no such column".into()))?;
                let size: usize = shape.iter().product();
                if size != col.size() {
                    return Err(invalid(
                        feature,
                        format!("{:?} has {} elements, {shape:?} has {size}", col.shape, col.size()),
                    ));
                }
                col.shape = shape.clone();
                CompiledMap::Reshape
            }
            Map::Pack { features, into } => {
                let names: Vec<&str> = match features.is_empty() {
                    // Every feature but the examples' weights, which weigh the loss.
                    true => schema.features.iter().map(|f| f.name.as_str()).filter(|n| *n != SAMPLE_WEIGHT).collect(),
                    false => features.iter().map(String::as_str).collect(),
                };
                if names.is_empty() {
                    return Err(invalid(into, "there are no features to pack".into()));
                }
                let mut columns = Vec::with_capacity(names.len());
                for name in &names {
                    let column = schema.index_of(name)?;
                    if Some(column) == schema.label_index() {
                        return Err(invalid(name, "the label cannot be packed into a feature".into()));
                    }
                    if columns.contains(&column) {
                        return Err(invalid(name, "listed twice".into()));
                    }
                    columns.push(column);
                }
                let size: usize = columns.iter().filter_map(|&c| schema.column(c)).map(|c| c.size()).sum();
                let first = columns.iter().copied().min().unwrap_or(0);
                let mut features = Vec::new();
                for (i, f) in schema.features.iter().enumerate() {
                    if i == first {
                        features.push(super::schema::FeatureInfo::new(into.clone(), DType::F32, vec![size]));
                    } else if !columns.contains(&i) {
                        features.push(f.clone());
                    }
                }
                out = Schema::new(features, schema.label.clone())?;
                CompiledMap::Pack { columns }
            }
            Map::RandomFlip { feature, mode, seed } => {
                CompiledMap::Augment(Request::Flip { feature, mode: *mode }.compile(schema, seed.unwrap_or(0))?)
            }
            Map::RandomTranslation { feature, height_factor, width_factor, fill_mode, fill_value, seed } => {
                let request = Request::Translate {
                    feature,
                    height: *height_factor,
                    width: *width_factor,
                    fill: *fill_mode,
                    value: *fill_value,
                };
                CompiledMap::Augment(request.compile(schema, seed.unwrap_or(0))?)
            }
            Map::RandomBrightness { feature, factor, value_range, seed } => {
                let request = Request::Brightness { feature, factor: *factor, range: *value_range };
                CompiledMap::Augment(request.compile(schema, seed.unwrap_or(0))?)
            }
            Map::RandomContrast { feature, factor, value_range, seed } => {
                let request = Request::Contrast { feature, factor: *factor, range: *value_range };
                CompiledMap::Augment(request.compile(schema, seed.unwrap_or(0))?)
            }
        };
        Ok((compiled, out))
    }
}

/// Column `c`'s f32 values from `starts[c]` on (from the first where `starts` has none).
fn tail<'a>(batch: &'a mut [HostData], starts: &[usize], c: usize) -> Option<&'a mut [f32]> {
    match batch.get_mut(c) {
        Some(HostData::F32(v)) => v.get_mut(starts.get(c).copied().unwrap_or(0)..),
        _ => None,
    }
}

impl CompiledMap {
    /// Whether the map only changes values in place: then it can run on an example's part
    /// of a batch's columns (`apply_from`) instead of on a row of its own.
    pub(crate) fn in_place(&self) -> bool {
        matches!(self, CompiledMap::Scale { .. } | CompiledMap::Normalize { .. } | CompiledMap::Reshape)
    }

    /// Applies an in-place map to the values of `batch`'s columns from `starts` on (one start per
    /// column; none: a row's whole columns): one example's part of a batch being assembled.
    /// Other maps do nothing here.
    pub(crate) fn apply_from(&self, batch: &mut [HostData], starts: &[usize]) {
        match self {
            CompiledMap::Scale { columns, divisor } => {
                for &c in columns {
                    if let Some(v) = tail(batch, starts, c) {
                        super::wide::divide(v, *divisor);
                    }
                }
            }
            CompiledMap::Normalize { column, mean, std } => {
                if let Some(v) = tail(batch, starts, *column) {
                    let n = mean.len();
                    for (i, x) in v.iter_mut().enumerate() {
                        *x = (*x - mean[i % n]) / std[i % n];
                    }
                }
            }
            _ => {}
        }
    }

    pub(crate) fn apply(&self, row: &mut Row, id: u64) -> Result<()> {
        let missing = || InputError::invalid(format!("example {id} has fewer columns than its schema"));
        match self {
            CompiledMap::Scale { .. } | CompiledMap::Normalize { .. } => self.apply_from(&mut row.values, &[]),
            CompiledMap::OneHot { column, depth, name } => {
                let value = row.values.get_mut(*column).ok_or_else(missing)?;
                if let HostData::I64(ids) = value {
                    let mut out = vec![0.0f32; ids.len() * depth];
                    for (i, &class) in ids.iter().enumerate() {
                        let Some(slot) = usize::try_from(class).ok().filter(|&c| c < *depth) else {
                            return Err(InputError::BadValue {
                                example: id,
                                detail: format!("`{name}` = {class} is outside one-hot depth {depth}"),
                            });
                        };
                        out[i * depth + slot] = 1.0;
                    }
                    *value = HostData::F32(out);
                }
            }
            CompiledMap::Cast { column, dtype } => {
                let value = row.values.get_mut(*column).ok_or_else(missing)?;
                *value = cast(std::mem::replace(value, HostData::Bool(Vec::new())), *dtype);
            }
            // An augmentation needs the example's place in the batch: the materializer
            // runs it (`Materializer::batch`), never as a map of one row.
            CompiledMap::Reshape | CompiledMap::Augment(_) => {}
            CompiledMap::Pack { columns } => {
                let mut packed = Vec::new();
                for &c in columns {
                    match row.values.get(c).ok_or_else(missing)? {
                        HostData::F32(v) => packed.extend_from_slice(v),
                        HostData::I64(v) => packed.extend(v.iter().map(|&x| x as f32)),
                        HostData::Bool(v) => packed.extend(v.iter().map(|&x| f32::from(u8::from(x)))),
                    }
                }
                let first = columns.iter().copied().min().unwrap_or(0);
                let mut values = Vec::with_capacity(row.values.len() + 1 - columns.len());
                for (i, v) in std::mem::take(&mut row.values).into_iter().enumerate() {
                    if i == first {
                        values.push(HostData::F32(std::mem::take(&mut packed)));
                    } else if !columns.contains(&i) {
                        values.push(v);
                    }
                }
                row.values = values;
            }
        }
        Ok(())
    }
}

fn cast(data: HostData, dtype: DType) -> HostData {
    match (data, dtype) {
        (HostData::F32(v), DType::I64) => HostData::I64(v.into_iter().map(|x| x as i64).collect()),
        (HostData::F32(v), DType::Bool) => HostData::Bool(v.into_iter().map(|x| x != 0.0).collect()),
        (HostData::I64(v), DType::F32) => HostData::F32(v.into_iter().map(|x| x as f32).collect()),
        (HostData::I64(v), DType::Bool) => HostData::Bool(v.into_iter().map(|x| x != 0).collect()),
        (HostData::Bool(v), DType::F32) => HostData::F32(v.into_iter().map(|x| f32::from(u8::from(x))).collect()),
        (HostData::Bool(v), DType::I64) => HostData::I64(v.into_iter().map(i64::from).collect()),
        (same, _) => same,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::schema::FeatureInfo;

    fn schema() -> Schema {
        Schema::new(
            vec![FeatureInfo::new("x", DType::F32, vec![2, 2]), FeatureInfo::new("k", DType::I64, vec![])],
            Some(FeatureInfo::new("y", DType::I64, vec![])),
        )
        .unwrap()
    }

    fn row() -> Row {
        Row { values: vec![HostData::F32(vec![2.0, 4.0, 6.0, 8.0]), HostData::I64(vec![1]), HostData::I64(vec![2])] }
    }

    fn run(map: Map) -> Result<(Row, Schema)> {
        let (compiled, schema) = map.compile(&schema())?;
        let mut r = row();
        compiled.apply(&mut r, 0)?;
        Ok((r, schema))
    }

    /// The in-place maps, run on one example's tail of a batch's columns, change exactly
    /// what they change on a row of its own, and leave the earlier examples alone.
    #[test]
    fn in_place_maps_on_a_batch_tail_equal_the_row_maps() {
        let maps = [
            Map::Scale(3.0),
            Map::Normalize { feature: "x".into(), mean: vec![2.0, 4.0], std: vec![1.0, 2.0] },
            Map::Reshape { feature: "x".into(), shape: vec![4] },
        ];
        for map in maps {
            let (compiled, _) = map.compile(&schema()).unwrap();
            assert!(compiled.in_place(), "{map:?}");
            let (expected, _) = run(map.clone()).unwrap();
            let earlier = row();
            let mut batch = earlier.values.clone();
            let starts: Vec<usize> = batch.iter().map(HostData::len).collect();
            for (column, value) in batch.iter_mut().zip(&row().values) {
                assert!(crate::input::schema::append_host_data(column, value));
            }
            compiled.apply_from(&mut batch, &starts);
            for ((column, before), after) in batch.iter().zip(&earlier.values).zip(&expected.values) {
                let mut both = before.clone();
                assert!(crate::input::schema::append_host_data(&mut both, after));
                assert_eq!(column, &both, "{map:?}");
            }
        }
        let (one_hot, _) = Map::OneHot { feature: "y".into(), depth: 3 }.compile(&schema()).unwrap();
        assert!(!one_hot.in_place());
    }

    #[test]
    fn scale_touches_float_features_only() {
        let (r, _) = run(Map::Scale(2.0)).unwrap();
        assert_eq!(r.values[0], HostData::F32(vec![1.0, 2.0, 3.0, 4.0]));
        assert_eq!(r.values[1], HostData::I64(vec![1]));
    }

    #[test]
    fn normalize_per_channel() {
        let (r, _) = run(Map::Normalize { feature: "x".into(), mean: vec![2.0, 4.0], std: vec![1.0, 2.0] }).unwrap();
        assert_eq!(r.values[0], HostData::F32(vec![0.0, 0.0, 4.0, 2.0]));
        assert!(run(Map::Normalize { feature: "x".into(), mean: vec![0.0; 3], std: vec![1.0; 3] }).is_err());
    }

    #[test]
    fn one_hot_label_changes_schema_and_checks_range() {
        let (r, s) = run(Map::OneHot { feature: "y".into(), depth: 3 }).unwrap();
        assert_eq!(r.values[2], HostData::F32(vec![0.0, 0.0, 1.0]));
        assert_eq!(s.label.unwrap().shape, vec![3]);
        let err = run(Map::OneHot { feature: "y".into(), depth: 2 }).unwrap_err();
        assert!(matches!(err, InputError::BadValue { .. }), "{err}");
        assert!(run(Map::OneHot { feature: "x".into(), depth: 2 }).is_err());
    }

    #[test]
    fn cast_and_reshape() {
        let (r, s) = run(Map::Cast { feature: "k".into(), dtype: DType::F32 }).unwrap();
        assert_eq!(r.values[1], HostData::F32(vec![1.0]));
        assert_eq!(s.features[1].dtype, DType::F32);
        let (_, s) = run(Map::Reshape { feature: "x".into(), shape: vec![4] }).unwrap();
        assert_eq!(s.features[0].shape, vec![4]);
        let err = run(Map::Reshape { feature: "x".into(), shape: vec![3] }).unwrap_err().to_string();
        assert!(err.contains("4 elements"), "{err}");
        let err = run(Map::Reshape { feature: "z".into(), shape: vec![3] }).unwrap_err().to_string();
        assert!(err.contains("no feature or label named `z`"), "{err}");
    }

    #[test]
    fn pack_concatenates_features_in_order_and_keeps_the_label() {
        let (r, s) = run(Map::Pack { features: vec![], into: "packed".into() }).unwrap();
        assert_eq!(s.features, vec![FeatureInfo::new("packed", DType::F32, vec![5])]);
        assert_eq!(s.label.as_ref().map(|l| l.name.as_str()), Some("y"));
        assert_eq!(r.values, vec![HostData::F32(vec![2.0, 4.0, 6.0, 8.0, 1.0]), HostData::I64(vec![2])]);
        let (r, s) = run(Map::Pack { features: vec!["k".into()], into: "kk".into() }).unwrap();
        assert_eq!(s.features[1], FeatureInfo::new("kk", DType::F32, vec![1]));
        assert_eq!(r.values[1], HostData::F32(vec![1.0]));
        let err = run(Map::Pack { features: vec!["y".into()], into: "p".into() }).unwrap_err().to_string();
        assert!(err.contains("label cannot be packed"), "{err}");
        // A categorical column one-hot encoded first packs as its `depth` numbers.
        let (one_hot, schema) = Map::OneHot { feature: "k".into(), depth: 3 }.compile(&schema()).unwrap();
        let (pack, packed) = Map::Pack { features: vec![], into: "x2".into() }.compile(&schema).unwrap();
        let mut r = row();
        one_hot.apply(&mut r, 0).unwrap();
        pack.apply(&mut r, 0).unwrap();
        assert_eq!(packed.features, vec![FeatureInfo::new("x2", DType::F32, vec![7])]);
        assert_eq!(r.values[0], HostData::F32(vec![2.0, 4.0, 6.0, 8.0, 0.0, 1.0, 0.0]));
    }
}
