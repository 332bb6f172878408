//! Normalization layers, with Keras' arguments and defaults.

use serde::Deserialize;

/// Keras' `BatchNormalization` over the last (channels) axis: batch statistics in
/// training, moving statistics in evaluation and prediction. `moving_mean` and
/// `moving_variance` are non-trainable variables the training step updates as
/// `moving * momentum + batch * (1 - momentum)` (the batch's biased variance, as Keras).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchNormalization {
    #[serde(default = "bn_momentum")]
    pub momentum: f32,
    #[serde(default = "epsilon")]
    pub epsilon: f32,
    /// Learn an offset `beta`.
    #[serde(default = "yes")]
    pub center: bool,
    /// Learn a scale `gamma`.
    #[serde(default = "yes")]
    pub scale: bool,
    /// Statistics over the global batch under `mirrored`, `central_storage` and
    /// `multi_worker` (Keras' `synchronized=True`): one all-reduce of the batch mean and
    /// mean square per layer and step. Ignored by `parameter_server`, whose workers do
    /// not step together.
    #[serde(default)]
    pub synchronized: bool,
}

/// Keras' `LayerNormalization` over the last axis.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormalization {
    #[serde(default = "epsilon")]
    pub epsilon: f32,
    #[serde(default = "yes")]
    pub center: bool,
    #[serde(default = "yes")]
    pub scale: bool,
}

fn bn_momentum() -> f32 {
    0.99
}

fn epsilon() -> f32 {
    1e-3
}

fn yes() -> bool {
    true
}
