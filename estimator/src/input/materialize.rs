//! Turning source indices into values: decode, apply the maps (and caches) in order, and
//! assemble batches. This is the expensive half of the pipeline, the part that runs on the
//! decoding threads; the cheap half (which indices, in which order) is in `stream`.

use super::augment::CompiledAugment;
use super::cache::CacheStore;
use super::error::{InputError, Result};
use super::example::{Batch, ExampleRef};
use super::filter::Filter;
use super::map::CompiledMap;
use super::schema::{Row, Schema, append_row, append_zeros, host_data_with_capacity};
use super::source::Source;
use super::state::IdBatch;
use super::stream::FilterOracle;
use engine_graph::{HostData, HostTensor};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The name of the padding mask feature of evaluation batches.
pub const MASK_FEATURE: &str = "mask";

#[derive(Debug)]
pub(crate) enum ElementStep {
    Map(CompiledMap),
    Cache(Arc<CacheStore>),
}

#[derive(Debug)]
pub(crate) struct CompiledFilter {
    /// How many element steps run before the filter sees an example.
    pub prefix: usize,
    pub filter: Filter,
    /// The schema at the filter's position.
    pub schema: Schema,
}

#[derive(Debug)]
pub(crate) struct Materializer {
    pub source: Arc<dyn Source>,
    pub steps: Vec<ElementStep>,
    pub filters: Vec<CompiledFilter>,
    /// The schema of the examples in batches.
    pub schema: Schema,
    /// Batches carry `mask` (evaluation with padding).
    pub padded: bool,
    /// Random augmentations, run on each example of a batch after every step (see `augment`).
    pub augments: Vec<CompiledAugment>,
}

impl Materializer {
    /// Example `id` after the first `upto` element steps.
    fn row(&self, id: u64, upto: usize) -> Result<Row> {
        let steps = &self.steps[..upto.min(self.steps.len())];
        // Start from the latest cache that already holds the example.
        let cached = steps.iter().enumerate().rev().find_map(|(k, step)| match step {
            ElementStep::Cache(store) => store.get(id).map(|row| (k + 1, row.clone())),
            ElementStep::Map(_) => None,
        });
        let (start, mut row) = match cached {
            Some(found) => found,
            None => (0, self.source.read(id)?),
        };
        for step in &steps[start..] {
            match step {
                ElementStep::Map(map) => map.apply(&mut row, id)?,
                ElementStep::Cache(store) => store.put(id, &row),
            }
        }
        Ok(row)
    }

    /// The first value of example `id`, as batches hold it, that is NaN or infinite:
    /// `(column, position in it, value)`. Decodes again: a batch is a pure function of
    /// its ids, so nothing needs to be kept around for this rare question.
    pub fn first_non_finite(&self, id: u64) -> Result<Option<(String, usize, f32)>> {
        let row = self.row(id, self.steps.len())?;
        for (info, value) in self.schema.columns().zip(&row.values) {
            if let HostData::F32(v) = value
                && let Some((at, x)) = v.iter().enumerate().find(|(_, x)| !x.is_finite())
            {
                return Ok(Some((info.name.clone(), at, *x)));
            }
        }
        Ok(None)
    }

    pub fn keep(&self, filter: usize, id: u64) -> Result<bool> {
        let f = self.filters.get(filter).ok_or_else(|| InputError::invalid(format!("no filter {filter}")))?;
        let row = self.row(id, f.prefix)?;
        Ok(f.filter.keep(&ExampleRef { schema: &f.schema, row: &row, id }))
    }

    /// The batch of `ids`, batch number `number` of the iteration (what augmentations draw by).
    pub fn batch(&self, ids: &IdBatch, number: u64) -> Result<Batch> {
        let rows = ids.rows.max(ids.ids.len());
        let mut columns: Vec<HostData> =
            self.schema.columns().map(|c| host_data_with_capacity(c.dtype, rows * c.size())).collect();
        // Every example's bytes are requested before the first is decoded, so that their
        // cache misses overlap (a cache step would read them from its store instead).
        if !self.steps.iter().any(|s| matches!(s, ElementStep::Cache(_))) {
            for &id in &ids.ids {
                self.source.prefetch(id);
            }
        }
        // Where every step changes values in place (scaling, normalizing, reshaping), the
        // source decodes each example straight into the batch and the steps run on its
        // part of each column while it is in L1; otherwise each example is a `Row` first.
        let in_place = self.steps.iter().all(|s| matches!(s, ElementStep::Map(m) if m.in_place()));
        let mut starts = Vec::with_capacity(columns.len());
        for (place, &id) in ids.ids.iter().enumerate() {
            starts.clear();
            starts.extend(columns.iter().map(HostData::len));
            if in_place {
                self.source.read_into(id, &mut columns)?;
                for step in &self.steps {
                    if let ElementStep::Map(map) = step {
                        map.apply_from(&mut columns, &starts);
                    }
                }
            } else {
                append_row(&mut columns, &self.schema, id, &self.row(id, self.steps.len())?)?;
            }
            for augment in &self.augments {
                augment.apply(&mut columns, &starts, number, place);
            }
        }
        let padding = rows - ids.ids.len();
        let mut features = BTreeMap::new();
        let mut labels = None;
        let label_index = self.schema.label_index();
        for (index, (mut data, info)) in columns.into_iter().zip(self.schema.columns()).enumerate() {
            append_zeros(&mut data, padding * info.size());
            let mut shape = Vec::with_capacity(info.shape.len() + 1);
            shape.push(rows);
            shape.extend_from_slice(&info.shape);
            let tensor = HostTensor { shape, data };
            if Some(index) == label_index {
                labels = Some(tensor);
            } else {
                features.insert(info.name.clone(), tensor);
            }
        }
        if self.padded {
            let mask = (0..rows).map(|r| if r < ids.ids.len() { 1.0 } else { 0.0 }).collect();
            features.insert(MASK_FEATURE.to_string(), HostTensor { shape: vec![rows], data: HostData::F32(mask) });
        }
        Ok(Batch { features, labels, len: rows, ids: ids.ids.clone() })
    }
}

/// Evaluates filters by decoding, and records the decisions so that a replaying copy of the
/// index stream (see `iter`) can follow without decoding again.
pub(crate) struct EvalOracle {
    pub materializer: Arc<Materializer>,
    pub log: Vec<bool>,
    pub record: bool,
}

impl EvalOracle {
    pub fn new(materializer: Arc<Materializer>, record: bool) -> Self {
        EvalOracle { materializer, log: Vec::new(), record }
    }
}

impl FilterOracle for EvalOracle {
    fn keep(&mut self, filter: usize, id: u64) -> Result<bool> {
        let keep = self.materializer.keep(filter, id)?;
        if self.record {
            self.log.push(keep);
        }
        Ok(keep)
    }
}
