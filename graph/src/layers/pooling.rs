//! The pooling and padding layers over NHWC (or `[batch, steps, features]`) inputs:
//! `AveragePooling2D`, `GlobalAveragePooling2D`, `GlobalAveragePooling1D`, `ZeroPadding2D`.

use crate::{
    GraphBuilder, Outlet, Result,
    ops::{Padding, Window},
};

/// Keras' `AveragePooling2D(pool_size, strides, padding)`; `strides` default to the pool size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AveragePooling2D {
    pub pool_size: [usize; 2],
    pub strides: Option<[usize; 2]>,
    pub padding: Padding,
}

impl AveragePooling2D {
    pub fn new(pool_size: usize) -> Self {
        AveragePooling2D { pool_size: [pool_size; 2], strides: None, padding: Padding::Valid }
    }

    pub fn window(&self) -> Window {
        Window { kernel: self.pool_size, strides: self.strides.unwrap_or(self.pool_size), padding: self.padding }
    }

    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("average_pooling2d");
        b.with_scope(&name, |b| b.avg_pool2d(x, self.window()))
    }
}

/// Keras' `GlobalAveragePooling2D()`: `[batch, height, width, channels]` to `[batch, channels]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalAveragePooling2D;

impl GlobalAveragePooling2D {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("global_average_pooling2d");
        b.with_scope(&name, |b| global_average(b, x, 4))
    }
}

/// Keras' `GlobalAveragePooling1D()`: `[batch, steps, features]` to `[batch, features]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalAveragePooling1D;

impl GlobalAveragePooling1D {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("global_average_pooling1d");
        b.with_scope(&name, |b| global_average(b, x, 3))
    }
}

/// The mean over every axis between the batch and the features of a rank-`rank` input.
pub fn global_average(b: &mut GraphBuilder<'_>, x: Outlet, rank: usize) -> Result<Outlet> {
    let axes: Vec<usize> = (1..rank.max(2) - 1).collect();
    b.reduce_mean(x, &axes, false)
}

/// Keras' `ZeroPadding2D(padding)`: `padding[0]` rows above and below, `padding[1]` columns
/// left and right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZeroPadding2D {
    pub padding: [usize; 2],
}

impl ZeroPadding2D {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("zero_padding2d");
        b.with_scope(&name, |b| self.build(b, x))
    }

    /// The layer in the current scope.
    pub fn build(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let [ph, pw] = self.padding;
        b.pad(x, &[(0, 0), (ph, ph), (pw, pw), (0, 0)])
    }
}
