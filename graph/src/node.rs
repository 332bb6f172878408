//! Nodes and the handles that point at their outputs.

use crate::{Fact, ops::Op};
use petgraph::stable_graph::NodeIndex;
use std::fmt;

pub type NodeId = NodeIndex<u32>;

/// One output of one node: what an edge carries and what a builder returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Outlet {
    pub node: NodeId,
    pub output: usize,
}

impl Outlet {
    pub fn new(node: NodeId, output: usize) -> Self {
        Outlet { node, output }
    }
}

impl From<NodeId> for Outlet {
    fn from(node: NodeId) -> Self {
        Outlet { node, output: 0 }
    }
}

impl fmt::Display for Outlet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}:{}", self.node.index(), self.output)
    }
}

/// A node of the computation graph.
///
/// `inputs` is the ordered list of what the node consumes; the petgraph edges mirror it so
/// that graph algorithms (topological order, reachability) see the same structure. Only
/// [`crate::Graph`] mutates nodes, which keeps the two in step.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub op: Op,
    pub inputs: Vec<Outlet>,
    pub outputs: Vec<Fact>,
    /// Where the node runs, once a placement pass has decided; `None` before placement.
    pub placement: Option<crate::Placement>,
}

/// An edge's payload: which output of the source feeds which input of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub output: usize,
    pub input: usize,
}
