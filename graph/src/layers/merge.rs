//! Keras' merge layers, several inputs into one: `Add`, `Multiply` (equal shapes, no
//! broadcasting between branches) and `Concatenate(axis)`.

use crate::{GraphBuilder, GraphError, Outlet, Result};

/// Keras' `Add()`: the sum of its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Add;

/// Keras' `Multiply()`: the elementwise product of its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Multiply;

/// Keras' `Concatenate(axis=-1)`: `axis` counts over the full shape (the batch axis is 0),
/// negative from the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concatenate {
    pub axis: i64,
}

impl Default for Concatenate {
    fn default() -> Self {
        Concatenate { axis: -1 }
    }
}

fn fold(
    b: &mut GraphBuilder<'_>,
    xs: &[Outlet],
    layer: &str,
    f: fn(&mut GraphBuilder<'_>, Outlet, Outlet) -> Result<Outlet>,
) -> Result<Outlet> {
    let (&first, rest) = xs.split_first().ok_or_else(|| GraphError::invalid(layer, "needs at least one input"))?;
    let shape = b.fact(first)?.shape.clone();
    let mut acc = first;
    for &x in rest {
        let other = &b.fact(x)?.shape;
        if *other != shape {
            return Err(GraphError::invalid(
                layer,
                format!("{layer} needs inputs of one shape, got {shape} and {other}"),
            ));
        }
        acc = f(b, acc, x)?;
    }
    Ok(acc)
}

impl Add {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, xs: &[Outlet]) -> Result<Outlet> {
        let name = b.unique_scope("add");
        b.with_scope(&name, |b| self.build(b, xs))
    }

    /// The layer in the current scope.
    pub fn build(&self, b: &mut GraphBuilder<'_>, xs: &[Outlet]) -> Result<Outlet> {
        fold(b, xs, "Add", |b, x, y| b.add(x, y))
    }
}

impl Multiply {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, xs: &[Outlet]) -> Result<Outlet> {
        let name = b.unique_scope("multiply");
        b.with_scope(&name, |b| self.build(b, xs))
    }

    /// The layer in the current scope.
    pub fn build(&self, b: &mut GraphBuilder<'_>, xs: &[Outlet]) -> Result<Outlet> {
        fold(b, xs, "Multiply", |b, x, y| b.mul(x, y))
    }
}

impl Concatenate {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, xs: &[Outlet]) -> Result<Outlet> {
        let name = b.unique_scope("concatenate");
        b.with_scope(&name, |b| self.build(b, xs))
    }

    /// The layer in the current scope.
    pub fn build(&self, b: &mut GraphBuilder<'_>, xs: &[Outlet]) -> Result<Outlet> {
        let first = *xs.first().ok_or_else(|| GraphError::invalid("Concatenate", "needs at least one input"))?;
        let shape = b.fact(first)?.shape.clone();
        let axis = shape.axis(self.axis).filter(|&a| a > 0).ok_or_else(|| {
            GraphError::invalid("Concatenate", format!("axis {} is not a non-batch axis of {shape}", self.axis))
        })?;
        b.concat(xs, axis as i64)
    }
}
