//! `Conv2d`: NHWC convolution with an HWIO kernel (`[kh, kw, channels / groups,
//! filters]`), optionally dilated and grouped, then bias and activation.

use super::{super::LowerError, super::build::Lowering};
use crate::spec::{Conv2d, FieldPath, Regularizer};
use engine_graph::{
    Dim, Outlet,
    layers::{self, Built},
    ops,
};

pub fn lower(
    cx: &mut Lowering<'_, '_, '_>,
    c: &Conv2d,
    name: &str,
    x: Outlet,
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let shape = cx.shape_of(x)?;
    let (hw, channels) = match shape.dims() {
        [n, Dim::Known(h), Dim::Known(w), Dim::Known(ch)] if n.is_batch() => ([*h, *w], *ch),
        _ => {
            return Err(cx.shape_error(
                path,
                format!("Conv2D needs an input of shape [batch, height, width, channels], got {shape}; a Reshape layer can make one"),
            ));
        }
    };
    let conv = ops::Conv2d { strides: c.strides.0, padding: c.padding, dilation: c.dilation_rate.0, groups: c.groups };
    if channels % c.groups != 0 {
        return Err(cx.shape_error(
            &path.field("groups"),
            format!("the input's {channels} channels do not split into {} groups", c.groups),
        ));
    }
    let per_group = channels / c.groups;
    let [kh, kw] = c.kernel_size.0;
    let (out_hw, _) = conv.window(c.kernel_size.0).output(hw).map_err(|why| {
        cx.shape_error(path, format!("kernel_size ({kh}, {kw}) does not fit the input {shape}: {why}"))
    })?;
    cx.check_variable(&path.field("filters"), "kernel", &[kh, kw, per_group, c.filters])?;
    let cost = [out_hw[0], out_hw[1], kh, kw, per_group, c.filters].map(|d| d as u64);
    cx.check_flops(path, &cost)?;
    let layer = layers::Conv2D {
        filters: c.filters,
        kernel_size: c.kernel_size.0,
        strides: c.strides.0,
        padding: c.padding,
        dilation_rate: c.dilation_rate.0,
        groups: c.groups,
        activation: c.activation,
        use_bias: c.use_bias,
        kernel_initializer: c.kernel_initializer.clone(),
        bias_initializer: c.bias_initializer.clone(),
    };
    debug_assert_eq!(layer.op(), conv);
    let Built { output: out, kernel, bias } = layer.build(cx.b, name, x).map_err(|e| cx.graph_error(path, e))?;
    if let Some(Regularizer::L2(f)) = c.kernel_regularizer {
        cx.regularizers.push((f, kernel));
    }
    if let (Some(Regularizer::L2(f)), Some(bias)) = (c.bias_regularizer, bias) {
        cx.regularizers.push((f, bias));
    }
    Ok(out)
}
