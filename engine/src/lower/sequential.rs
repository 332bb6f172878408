//! `Sequential`: one placeholder `x`, each layer applied to the previous output.

use super::{LowerError, build::Lowering, layers};
use crate::spec::{FieldPath, Sequential};
use engine_graph::{DType, Outlet, Shape};
use std::collections::BTreeMap;

/// The feed name of a sequential model's input.
pub const FEATURES: &str = "x";

pub(super) fn build(
    cx: &mut Lowering<'_, '_, '_>,
    s: &Sequential,
) -> Result<(BTreeMap<String, Outlet>, Outlet, FieldPath), LowerError> {
    let path = FieldPath::root().field("model");
    let x = cx.input(FEATURES, 1, DType::F32, Shape::batched(&s.input_shape), &path.field("input_shape"))?;
    cx.check_output(&path.field("input_shape"), x)?;
    let mut out = x;
    let mut out_name = FEATURES.to_string();
    let mut out_path = path.field("input_shape");
    for (i, layer) in s.layers.iter().enumerate() {
        let at = path.field("layers").index(i);
        let name = cx.layer_name(layer.keras_name());
        out = layers::apply(cx, layer, &name, &[(out_name, out)], &at)?;
        out_name = name;
        out_path = at;
    }
    Ok((BTreeMap::from([(FEATURES.to_string(), x)]), out, out_path))
}
