//! `Dropout`: present in training graphs only.

use super::super::{LowerError, Mode, build::Lowering};
use crate::spec::{Dropout, FieldPath};
use engine_graph::{Outlet, derive_seed};

pub fn lower(
    cx: &mut Lowering<'_, '_, '_>,
    d: &Dropout,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    if cx.mode != Mode::Train || d.rate == 0.0 {
        return Ok(x);
    }
    // A seed written in the spec pins this layer's masks whatever the job seed is, as
    // Keras' `Dropout(seed=...)` does; otherwise they follow the job seed.
    let seed = derive_seed(d.seed.unwrap_or(cx.seed), name);
    let rate = d.rate;
    cx.b.with_scope(name, |b| b.dropout(x, rate, seed)).map_err(|e| cx.graph_error(path, e))
}
