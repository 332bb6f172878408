//! One function per kind of layer, each wiring graph ops under the layer's scope.
//!
//! Shapes are checked here, before wiring, so that a mismatch reads in the spec's terms
//! ("Dense needs [batch, features]; add Flatten") rather than as an op's complaint.

mod activation;
mod attention;
mod conv;
mod dense;
mod dropout;
mod merge;
mod normalization;
mod pool;
mod reshape;

use super::{LowerError, build::LayerOutput, build::Lowering};
use crate::spec::{FieldPath, Layer};
use engine_graph::Outlet;

pub(super) use activation::activate;

/// Applies `layer` (at `path` in the spec), named `name`, to `inputs` (each with the
/// name of the layer or input that produced it), and records its output.
pub(super) fn apply(
    cx: &mut Lowering<'_, '_, '_>,
    layer: &Layer,
    name: &str,
    inputs: &[(String, Outlet)],
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let first = inputs.first().map(|i| i.1).ok_or_else(|| cx.shape_error(path, "the layer has no input"))?;
    if !layer.inputs().contains(&inputs.len()) {
        return Err(cx.shape_error(path, format!("`{}` cannot take {} inputs", layer.spec_name(), inputs.len())));
    }
    let out = match layer {
        Layer::Dense(d) => dense::lower(cx, d, name, first, path)?,
        Layer::Conv2d(c) => conv::lower(cx, c, name, first, path)?,
        Layer::MaxPool2d(p) => pool::lower(cx, p, pool::Kind::Max, name, first, path)?,
        Layer::AvgPool2d(p) => pool::lower(cx, p, pool::Kind::Avg, name, first, path)?,
        Layer::Flatten => reshape::flatten(cx, name, first, path)?,
        Layer::Reshape(r) => reshape::reshape(cx, r, name, first, path)?,
        Layer::Dropout(d) => dropout::lower(cx, d, name, first, path)?,
        Layer::Activation(a) => {
            let a = *a;
            cx.b.with_scope(name, |b| activate(b, first, a)).map_err(|e| cx.graph_error(path, e))?
        }
        Layer::Add => merge::elementwise(cx, merge::Kind::Add, name, inputs, path)?,
        Layer::Multiply => merge::elementwise(cx, merge::Kind::Multiply, name, inputs, path)?,
        Layer::Concatenate(c) => merge::concatenate(cx, c.axis, name, inputs, path)?,
        Layer::BatchNormalization(n) => normalization::batch_norm(cx, n, name, first, path)?,
        Layer::LayerNormalization(n) => normalization::layer_norm(cx, n, name, first, path)?,
        Layer::GlobalAveragePooling2D => pool::global_average(cx, 4, "GlobalAveragePooling2D", name, first, path)?,
        Layer::GlobalAveragePooling1D => pool::global_average(cx, 3, "GlobalAveragePooling1D", name, first, path)?,
        Layer::ZeroPadding2D(z) => pool::zero_padding(cx, z, name, first, path)?,
        Layer::MultiHeadAttention(m) => {
            let xs: Vec<Outlet> = inputs.iter().map(|i| i.1).collect();
            attention::multi_head_attention(cx, m, name, &xs, path)?
        }
        Layer::AddPositionEmbedding(p) => attention::add_position_embedding(cx, p, name, first, path)?,
        Layer::Embedding(e) => attention::embedding(cx, e, name, first, path)?,
    };
    cx.check_output(path, out)?;
    cx.layers.push(LayerOutput { name: name.to_string(), kind: layer.spec_name(), path: path.clone(), output: out });
    Ok(out)
}
