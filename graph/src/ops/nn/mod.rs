//! Convolution, pooling and dropout, in TensorFlow's NHWC layout with HWIO filters.
//!
//! The graph keeps TensorFlow's layout so that specs, shapes in errors and checkpoints read
//! as a TensorFlow user expects; the runtime is free to compute in another layout.

mod avg_pool2d;
mod avg_pool2d_grad;
mod conv2d;
mod conv2d_backprop_filter;
mod conv2d_backprop_input;
mod dropout;
mod max_pool2d;
mod max_pool2d_grad;
mod max_pool_grad_with_argmax;
pub(crate) mod padding;

pub use avg_pool2d::AvgPool2d;
pub use avg_pool2d_grad::AvgPool2dGrad;
pub use conv2d::Conv2d;
pub use conv2d_backprop_filter::Conv2dBackpropFilter;
pub use conv2d_backprop_input::Conv2dBackpropInput;
pub use dropout::Dropout;
pub use max_pool_grad_with_argmax::MaxPoolGradWithArgmax;
pub use max_pool2d::MaxPool2d;
pub use max_pool2d_grad::MaxPool2dGrad;
pub use padding::{Padding, Window};
