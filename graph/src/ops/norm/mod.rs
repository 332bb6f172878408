//! Normalization as single ops, as TensorFlow has `FusedBatchNormV3` and PyTorch
//! `native_layer_norm`: a kernel that sees the whole normalization reads the activations
//! twice forward and twice backward, where the composite of means, squares and quotients
//! (what the layers lower to, so that autodiff and every backend see through them) makes
//! six passes forward and a dozen backward. The `fuse-normalization` pass forms these ops
//! from the composites before autodiff, so their gradient is the fused one too.

mod composite;
mod fused_normalization;
mod fused_normalization_grad;

pub use fused_normalization::{FusedNormalization, Normalization};
pub use fused_normalization_grad::FusedNormalizationGrad;
