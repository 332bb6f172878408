//! Keras' `BatchNormalization` and `LayerNormalization`: their variables and moving
//! averages around the builder's normalization composites, which the `fuse-normalization`
//! pass turns into single ops. The spec's layers build through `build`, under the name the
//! spec gives them; `apply` picks Keras' next free name.

use crate::{GraphBuilder, Initializer, Outlet, Result};

/// Keras' `BatchNormalization(momentum=0.99, epsilon=1e-3, center=True, scale=True,
/// synchronized=False)` over the last axis. In training it normalizes by the batch's
/// statistics and registers the moving averages as updates (`roles.updates`, applied with
/// the train op); otherwise it reads the moving statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormalization {
    pub momentum: f32,
    pub epsilon: f32,
    /// Learn an offset `beta`.
    pub center: bool,
    /// Learn a scale `gamma`.
    pub scale: bool,
    /// Statistics over the global batch under the all-reducing strategies: the batch mean
    /// and mean square about the moving mean are what replicas average
    /// (`roles.cross_replica_means`).
    pub synchronized: bool,
}

impl Default for BatchNormalization {
    fn default() -> Self {
        BatchNormalization { momentum: 0.99, epsilon: 1e-3, center: true, scale: true, synchronized: false }
    }
}

impl BatchNormalization {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet, training: bool) -> Result<Outlet> {
        let name = b.unique_scope("batch_normalization");
        b.with_scope(&name, |b| self.build(b, x, training))
    }

    /// The layer in the current scope.
    pub fn build(&self, b: &mut GraphBuilder<'_>, x: Outlet, training: bool) -> Result<Outlet> {
        let (c, rank) = features(b, x, "BatchNormalization")?;
        let axes: Vec<usize> = (0..rank - 1).collect();
        let gamma = self.scale.then(|| b.variable("gamma", &[c], Initializer::Ones, true)).transpose()?;
        let beta = self.center.then(|| b.variable("beta", &[c], Initializer::Zeros, true)).transpose()?;
        let moving_mean = b.variable("moving_mean", &[c], Initializer::Zeros, false)?;
        let moving_var = b.variable("moving_variance", &[c], Initializer::Ones, false)?;
        let (mean, var) = if training {
            let (mean, var) = if self.synchronized {
                // The moments of `d = x - moving_mean`, whose two means (of `d` and `d²`)
                // are what replicas average: `var = E[d²] - E[d]²`. Keras takes them of
                // `x` itself, and in f32 `E[x²] - E[x]²` loses the variance's digits to
                // cancellation where the mean is large against the spread (every digit at a
                // mean of 1000 and a spread of 0.01, and the `max` with zero then hides
                // it). The moving mean is the same on every replica, tracks the batch mean
                // after the first steps, and is not trained, so nothing is differentiated
                // through it: `x`'s gradient is the same function.
                let d = b.sub(x, moving_mean)?;
                let mean_d = b.reduce_mean(d, &axes, false)?;
                let sq = b.square(d)?;
                let mean_sq = b.reduce_mean(sq, &axes, false)?;
                b.graph_mut().roles.cross_replica_means.extend([mean_d, mean_sq]);
                let m2 = b.square(mean_d)?;
                let var = b.sub(mean_sq, m2)?;
                let zero = b.scalar(0.0)?;
                (b.add(mean_d, moving_mean)?, b.maximum(var, zero)?)
            } else {
                b.batch_moments(x)?
            };
            // The updates read the batch statistics after synchronization: the pass rewires
            // every reader, these included.
            let new_mean = moving_average(b, moving_mean, mean, self.momentum)?;
            let new_var = moving_average(b, moving_var, var, self.momentum)?;
            let updates = &mut b.graph_mut().roles.updates;
            updates.extend([(moving_mean.node, new_mean), (moving_var.node, new_var)]);
            (mean, var)
        } else {
            (moving_mean, moving_var)
        };
        b.batch_normalize(x, (mean, var), gamma, beta, self.epsilon)
    }
}

/// Keras' `LayerNormalization(epsilon=1e-3, center=True, scale=True)` over the last axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNormalization {
    pub epsilon: f32,
    pub center: bool,
    pub scale: bool,
}

impl Default for LayerNormalization {
    fn default() -> Self {
        LayerNormalization { epsilon: 1e-3, center: true, scale: true }
    }
}

impl LayerNormalization {
    pub fn apply(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let name = b.unique_scope("layer_normalization");
        b.with_scope(&name, |b| self.build(b, x))
    }

    /// The layer in the current scope.
    pub fn build(&self, b: &mut GraphBuilder<'_>, x: Outlet) -> Result<Outlet> {
        let (c, _) = features(b, x, "LayerNormalization")?;
        let gamma = self.scale.then(|| b.variable("gamma", &[c], Initializer::Ones, true)).transpose()?;
        let beta = self.center.then(|| b.variable("beta", &[c], Initializer::Zeros, true)).transpose()?;
        b.layer_normalize(x, gamma, beta, self.epsilon)
    }
}

/// The last axis's size and the rank: both layers normalize per feature of `[batch, ..., features]`.
fn features(b: &GraphBuilder<'_>, x: Outlet, layer: &str) -> Result<(usize, usize)> {
    let shape = &b.fact(x)?.shape;
    match (shape.dims().first(), shape.dims().last().and_then(|d| d.known())) {
        (Some(n), Some(c)) if n.is_batch() && shape.rank() >= 2 => Ok((c, shape.rank())),
        _ => Err(crate::GraphError::invalid(
            layer,
            format!("{layer} needs an input of shape [batch, ..., features], got {shape}"),
        )),
    }
}

/// `moving * momentum + batch * (1 - momentum)`.
fn moving_average(b: &mut GraphBuilder<'_>, moving: Outlet, batch: Outlet, momentum: f32) -> Result<Outlet> {
    let keep = b.scalar(momentum)?;
    let kept = b.mul(moving, keep)?;
    let take = b.scalar(1.0 - momentum)?;
    let taken = b.mul(batch, take)?;
    b.add(kept, taken)
}
