//! Activation functions.

mod log_softmax;
mod relu;
mod relu_grad;
mod sigmoid;
mod softmax;
mod tanh;

pub use log_softmax::LogSoftmax;
pub use relu::Relu;
pub use relu_grad::ReluGrad;
pub use sigmoid::Sigmoid;
pub use softmax::Softmax;
pub use tanh::Tanh;
