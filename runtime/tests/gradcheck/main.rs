//! Finite-difference gradient checks: every differentiable op's gradient rule, executed by
//! the real kernels, against central differences of the same graph, all in f64.
//!
//! Each check builds `loss = sum(op(inputs) * R)` for a fixed random `R` (so every output
//! element matters with a distinct weight), derives the gradients symbolically, and
//! perturbs every input element by ±h.

mod harness;
mod ops_attention;
mod ops_math;
mod ops_nn;
mod ops_norm;
mod ops_shape;
