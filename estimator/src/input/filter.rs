//! Keeping only some examples: by label or finiteness (from a spec) or by any Rust predicate.
//!
//! Filters decide on index streams like every other stage, but their decision needs the
//! example's values, so they decode it (through the maps before them). A predicate must be a
//! pure function of the example: resumption replays its decisions, and every pipeline
//! computes every shard's size with it.

use super::error::{InputError, Result};
use super::example::ExampleRef;
use super::schema::Schema;
use engine_graph::DType;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Filters a job spec can name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Predicate {
    /// Keeps examples whose (scalar i64) label is one of these.
    LabelIn(Vec<i64>),
    /// Drops examples whose (scalar i64) label is one of these.
    LabelNotIn(Vec<i64>),
    /// Drops examples with a NaN or an infinity in any float feature or label: TensorFlow
    /// users' `filter(lambda x, y: tf.reduce_all(tf.math.is_finite(x)))`, for data known to
    /// have holes (training refuses them otherwise; see `run_config.non_finite`).
    AllFinite,
}

pub type FilterFn = Arc<dyn Fn(&ExampleRef<'_>) -> bool + Send + Sync>;

#[derive(Clone)]
pub(crate) enum Filter {
    Predicate(Predicate),
    /// A Rust closure, named for the dataset's fingerprint and messages.
    Closure {
        name: String,
        keep: FilterFn,
    },
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Filter::Predicate(p) => write!(f, "{p:?}"),
            Filter::Closure { name, .. } => write!(f, "Closure({name})"),
        }
    }
}

impl Filter {
    pub(crate) fn compile(&self, schema: &Schema) -> Result<()> {
        if let Filter::Predicate(Predicate::LabelIn(_) | Predicate::LabelNotIn(_)) = self {
            match &schema.label {
                Some(label) if label.dtype == DType::I64 && label.size() == 1 => {}
                other => {
                    return Err(InputError::invalid(format!(
                        "{self:?} needs a scalar i64 label at this point of the pipeline, found {other:?}"
                    )));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn keep(&self, example: &ExampleRef<'_>) -> bool {
        match self {
            Filter::Predicate(Predicate::LabelIn(set)) => label(example).is_some_and(|l| set.contains(&l)),
            Filter::Predicate(Predicate::LabelNotIn(set)) => label(example).is_some_and(|l| !set.contains(&l)),
            Filter::Predicate(Predicate::AllFinite) => example.row.values.iter().all(|v| match v {
                engine_graph::HostData::F32(values) => values.iter().all(|x| x.is_finite()),
                _ => true,
            }),
            Filter::Closure { keep, .. } => keep(example),
        }
    }
}

fn label(example: &ExampleRef<'_>) -> Option<i64> {
    example.label()?.as_i64()?.first().copied()
}
