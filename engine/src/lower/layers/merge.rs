//! `Add`, `Multiply` and `Concatenate`: several inputs into one (functional models).

use super::super::{LowerError, build::Lowering};
use crate::spec::FieldPath;
use engine_graph::{Outlet, Shape, layers};

#[derive(Clone, Copy)]
pub enum Kind {
    Add,
    Multiply,
}

/// Inputs must have equal shapes, as in Keras (no broadcasting between branches).
pub fn elementwise(
    cx: &mut Lowering<'_, '_, '_>,
    kind: Kind,
    name: &str,
    inputs: &[(String, Outlet)],
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let shapes = shapes(cx, inputs)?;
    let layer = match kind {
        Kind::Add => "Add",
        Kind::Multiply => "Multiply",
    };
    if let Some(i) = shapes.iter().position(|s| *s != shapes[0]) {
        return Err(
            cx.shape_error(path, format!("{layer} needs inputs of one shape: {}", describe(inputs, &shapes, &[0, i])))
        );
    }
    let xs: Vec<Outlet> = inputs.iter().map(|i| i.1).collect();
    cx.b.with_scope(name, |b| match kind {
        Kind::Add => layers::Add.build(b, &xs),
        Kind::Multiply => layers::Multiply.build(b, &xs),
    })
    .map_err(|e| cx.graph_error(path, e))
}

/// `axis` counts over the full shape (the batch axis is 0), negative from the end.
pub fn concatenate(
    cx: &mut Lowering<'_, '_, '_>,
    axis: i64,
    name: &str,
    inputs: &[(String, Outlet)],
    path: &FieldPath,
) -> Result<Outlet, LowerError> {
    let shapes = shapes(cx, inputs)?;
    let first = &shapes[0];
    let a = first.axis(axis).filter(|&a| a > 0).ok_or_else(|| {
        cx.shape_error(&path.field("axis"), format!("axis {axis} is not a non-batch axis of {first}"))
    })?;
    for (i, s) in shapes.iter().enumerate().skip(1) {
        let same = s.rank() == first.rank() && (0..s.rank()).all(|d| d == a || s.dim(d) == first.dim(d));
        if !same {
            return Err(cx.shape_error(
                path,
                format!(
                    "Concatenate on axis {axis} needs inputs that differ only on that axis: {}",
                    describe(inputs, &shapes, &[0, i])
                ),
            ));
        }
    }
    let xs: Vec<Outlet> = inputs.iter().map(|i| i.1).collect();
    cx.b.with_scope(name, |b| layers::Concatenate { axis }.build(b, &xs)).map_err(|e| cx.graph_error(path, e))
}

fn shapes(cx: &Lowering<'_, '_, '_>, inputs: &[(String, Outlet)]) -> Result<Vec<Shape>, LowerError> {
    inputs.iter().map(|(_, o)| cx.shape_of(*o)).collect()
}

/// "`conv_a` gives [N, 26, 26, 8], `image` gives [N, 28, 28, 8]"
fn describe(inputs: &[(String, Outlet)], shapes: &[Shape], which: &[usize]) -> String {
    which.iter().map(|&i| format!("`{}` gives {}", inputs[i].0, shapes[i])).collect::<Vec<_>>().join(", ")
}
