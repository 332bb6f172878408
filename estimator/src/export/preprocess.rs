//! The input's transforms as graph nodes, for an export whose requests carry raw features:
//! `Scale(d)` divides every f32 feature by `d`, `Normalize` takes `(x - mean) / std` of one
//! feature, as the input pipeline does (`input::Map`).

use crate::input::{Map, Schema};
use engine_graph::{DType, GraphBuilder, GraphError, HostTensor, Outlet, Result};
use std::collections::BTreeMap;

/// The features after `maps`, from the placeholders `inputs`.
pub fn preprocess(
    b: &mut GraphBuilder<'_>,
    inputs: &BTreeMap<String, Outlet>,
    schema: &Schema,
    maps: &[Map],
) -> Result<BTreeMap<String, Outlet>> {
    let mut features = inputs.clone();
    for map in maps {
        match map {
            Map::Scale(divisor) => {
                for f in schema.features.iter().filter(|f| f.dtype == DType::F32) {
                    let Some(x) = features.get(&f.name).copied() else { continue };
                    let d = b.scalar(*divisor)?;
                    features.insert(f.name.clone(), b.div(x, d)?);
                }
            }
            Map::Normalize { feature, mean, std } => {
                let info = schema.features.iter().find(|f| &f.name == feature).ok_or_else(|| {
                    GraphError::invalid(
                        "preprocessing",
                        format!("Normalize names `{feature}`, which the served input lacks"),
                    )
                })?;
                let x = features[&info.name];
                let per = |values: &[f32]| -> Result<HostTensor> {
                    let last = info.shape.last().copied().unwrap_or(1);
                    let shape = match values.len() {
                        1 => vec![1],
                        n if n == last => vec![n],
                        _ => info.shape.clone(),
                    };
                    HostTensor::f32(shape, values.to_vec())
                };
                let m = b.constant(per(mean)?)?;
                let s = b.constant(per(std)?)?;
                let centered = b.sub(x, m)?;
                features.insert(info.name.clone(), b.div(centered, s)?);
            }
            other => {
                return Err(GraphError::invalid(
                    "preprocessing",
                    format!("an export cannot run {other:?} before the model"),
                ));
            }
        }
    }
    Ok(features)
}

/// A map as an export's manifest lists it: short, even for a per-element `Normalize` of a
/// packed table.
pub fn describe(map: &Map) -> String {
    match map {
        Map::Normalize { feature, mean, std } if mean.len() > 4 => {
            format!("Normalize(feature: {feature:?}, {} per-element means and stds)", mean.len().max(std.len()))
        }
        other => format!("{other:?}"),
    }
}
