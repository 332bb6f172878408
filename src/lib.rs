//! `engine`: a graph-compiling training engine in the style of TensorFlow's Estimator.
//!
//! This root package re-exports the workspace's crates under short names, so examples and
//! end-to-end tests use one dependency: the graph IR ([`graph`]), the executor
//! ([`runtime`]), the Estimator workflow ([`estimator`]) and the command line with its
//! RON job specs ([`cli`]).

pub use engine_cli as cli;
pub use engine_estimator as estimator;
pub use engine_graph as graph;
pub use engine_runtime as runtime;
