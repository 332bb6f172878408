//! The engine's intermediate representation: a computation graph with symbolic shapes,
//! gradients derived as graph nodes, optimizer updates lowered to graph nodes, and the
//! passes that turn a model into a scheduled plan.
//!
//! This crate is pure: no tensors on devices, no files, no sockets, no async. Everything
//! here can be printed and tested without a backend; `engine-runtime` executes a [`Plan`].
//!
//! ```
//! use engine_graph::{Graph, GraphBuilder, DType, Shape, Initializer};
//!
//! let mut graph = Graph::new();
//! let mut b = GraphBuilder::new(&mut graph);
//! let x = b.placeholder("x", DType::F32, Shape::batched(&[4]))?;
//! let w = b.variable("w", &[4, 2], Initializer::GlorotUniform, true)?;
//! let y = b.matmul(x, w)?;
//! assert_eq!(b.fact(y)?.shape.to_string(), "[N, 2]");
//! # Ok::<(), engine_graph::GraphError>(())
//! ```

pub mod autodiff;
mod builder;
mod device_name;
mod dot;
mod dtype;
mod error;
mod fact;
mod fingerprint;
mod graph;
mod graph_def;
mod init;
pub mod layers;
mod node;
pub mod onnx;
pub mod ops;
pub mod optimizer;
pub mod passes;
mod placement;
mod plan;
mod roles;
pub mod row_sparse;
mod shape;
mod tensor;
mod tensor_rows;

pub use builder::GraphBuilder;
pub use device_name::{BadDeviceName, DeviceKind, DeviceName, MAX_DEVICE_INDEX};
pub use dtype::DType;
pub use error::{GraphError, Result, fmt_error_chain};
pub use fact::Fact;
pub use graph::Graph;
pub use graph_def::{GraphDef, NodeDef, OutletDef};
pub use init::{Initializer, derive_seed};
pub use node::{Edge, Node, NodeId, Outlet};
pub use ops::Op;
pub use placement::{BadPlacement, Placement};
pub use plan::{Plan, PlanStats, human_bytes};
pub use roles::Roles;
pub use shape::{Dim, Shape};
pub use tensor::{HostData, HostTensor};
