//! `Dense`: `activation(x @ kernel + bias)` on `[batch, features]`, or on the last axis of
//! `[batch, tokens, features]` (every token alike, as Keras does). Keras would also map
//! the channels of an image; here that is refused with a hint, because a Dense straight
//! after a convolution is nearly always a forgotten Flatten.

use super::{super::LowerError, super::build::Lowering};
use crate::spec::{Dense, FieldPath, Regularizer};
use engine_graph::{
    Dim, Outlet,
    layers::{self, Built},
};

pub fn lower(
    cx: &mut Lowering<'_, '_, '_>,
    d: &Dense,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let shape = cx.shape_of(x)?;
    let features = match shape.dims() {
        [n, Dim::Known(f)] | [n, Dim::Known(_), Dim::Known(f)] if n.is_batch() => *f,
        _ => {
            let hint = if shape.rank() > 3 { "; add a Flatten layer before it" } else { "" };
            return Err(cx.shape_error(
                path,
                format!(
                    "Dense needs an input of shape [batch, features] or [batch, tokens, features], got {shape}{hint}"
                ),
            ));
        }
    };
    cx.check_variable(&path.field("units"), "kernel", &[features, d.units])?;
    let layer = layers::Dense {
        units: d.units,
        activation: d.activation,
        use_bias: d.use_bias,
        kernel_initializer: d.kernel_initializer.clone(),
        bias_initializer: d.bias_initializer.clone(),
    };
    let Built { output: out, kernel, bias } = layer.build(cx.b, name, x).map_err(|e| cx.graph_error(path, e))?;
    if let Some(Regularizer::L2(f)) = d.kernel_regularizer {
        cx.regularizers.push((f, kernel));
    }
    if let (Some(Regularizer::L2(f)), Some(bias)) = (d.bias_regularizer, bias) {
        cx.regularizers.push((f, bias));
    }
    Ok(out)
}
