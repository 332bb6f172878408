//! The layers without variables: `MaxPooling2D`, `Flatten`, `Reshape`, `Dropout`.

use crate::{
    GraphBuilder, Outlet, Result, derive_seed,
    ops::{Padding, Window},
};

/// Keras' `MaxPooling2D(pool_size, strides, padding)`; `strides` default to the pool size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaxPooling2D {
    pub pool_size: [usize; 2],
    pub strides: Option<[usize; 2]>,
    pub padding: Padding,
}

impl MaxPooling2D {
    pub fn new(pool_size: usize) -> Self {
        MaxPooling2D { pool_size: [pool_size; 2], strides: None, padding: Padding::Valid }
    }

    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let window =
            Window { kernel: self.pool_size, strides: self.strides.unwrap_or(self.pool_size), padding: self.padding };
        let name = b.unique_scope("max_pooling2d");
        b.with_scope(&name, |b| b.max_pool2d(x, window))
    }
}

/// Keras' `Flatten()`: `[batch, d1, d2, ...]` to `[batch, d1 * d2 * ...]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flatten;

impl Flatten {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("flatten");
        b.with_scope(&name, |b| b.flatten(x))
    }
}

/// Keras' `Reshape(target_shape)`: the batch dimension stays, the rest becomes
/// `target_shape` (one `-1` takes what is left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reshape {
    pub target_shape: Vec<i64>,
}

impl Reshape {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("reshape");
        b.with_scope(&name, |b| b.reshape_batched(x, &self.target_shape))
    }
}

/// Keras' `Dropout(rate, seed)`: active in training only, so `apply` takes whether the graph
/// trains (`mode == Mode::Train` in a model function). Without a seed the masks follow
/// `job_seed` and the layer's name.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dropout {
    pub rate: f32,
    pub seed: Option<u64>,
}

impl Dropout {
    pub fn new(rate: f32) -> Self {
        Dropout { rate, seed: None }
    }

    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet, training: bool, job_seed: u64) -> Result<Outlet> {
        let name = b.unique_scope("dropout");
        if !training || self.rate == 0.0 {
            return Ok(x);
        }
        let seed = derive_seed(self.seed.unwrap_or(job_seed), &name);
        b.with_scope(&name, |b| b.dropout(x, self.rate, seed))
    }
}
