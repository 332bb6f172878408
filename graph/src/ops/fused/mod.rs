//! Fused ops that optimization passes form after autodiff (TensorFlow's `_FusedConv2D`
//! and `_FusedMatMul`). They exist so kernels can write a result once instead of once per
//! elementwise step; they have no gradient rule because they never appear before
//! differentiation.

mod fused_activation;
mod fused_conv2d;
mod fused_conv2d_backprop_input;
mod fused_conv2d_max_pool;
mod fused_elementwise;
mod fused_matmul;
mod fused_max_pool_conv2d_backprop_filter;

pub use fused_activation::FusedActivation;
pub use fused_conv2d::FusedConv2d;
pub use fused_conv2d_backprop_input::FusedConv2dBackpropInput;
pub use fused_conv2d_max_pool::FusedConv2dMaxPool;
pub use fused_elementwise::{ElementOp, FusedElementwise, Instr, Operand, is_single};
pub use fused_matmul::FusedMatMul;
pub use fused_max_pool_conv2d_backprop_filter::FusedMaxPoolConv2dBackpropFilter;
