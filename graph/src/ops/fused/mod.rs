//! Fused ops that optimization passes form after autodiff (TensorFlow's `_FusedConv2D`
//! and `_FusedMatMul`). They exist so kernels can write a result once instead of once per
//! elementwise step; they have no gradient rule because they never appear before
//! differentiation.

mod activation;
mod fused_conv2d;
mod fused_matmul;

pub use activation::Activation;
pub use fused_conv2d::FusedConv2d;
pub use fused_matmul::FusedMatMul;
