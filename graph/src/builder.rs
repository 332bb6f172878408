//! A builder that wires nodes into a graph under name scopes.
//!
//! Every op file adds its own constructor method to `GraphBuilder` (for example
//! `ops/math/matmul.rs` defines `GraphBuilder::matmul`), so an op's definition, shape rule,
//! gradient and constructor sit together.

use crate::{Fact, Graph, NodeId, Outlet, Result, ops::Op};

pub struct GraphBuilder<'g> {
    graph: &'g mut Graph,
    scope: Vec<String>,
}

impl<'g> GraphBuilder<'g> {
    pub fn new(graph: &'g mut Graph) -> Self {
        GraphBuilder { graph, scope: Vec::new() }
    }

    pub fn graph(&self) -> &Graph {
        self.graph
    }

    pub fn graph_mut(&mut self) -> &mut Graph {
        self.graph
    }

    pub fn fact(&self, o: Outlet) -> Result<&Fact> {
        self.graph.fact(o)
    }

    /// Runs `f` with `name` pushed on the scope stack (`dense_1/...`).
    pub fn with_scope<T>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.scope.push(name.to_string());
        let out = f(self);
        self.scope.pop();
        out
    }

    /// A scope name not used yet at this level (`dense`, `dense_1`, ...), like Keras' layer names.
    pub fn unique_scope(&self, base: &str) -> String {
        let prefix = self.prefixed(base);
        let taken = |candidate: &str| {
            let p = format!("{candidate}/");
            self.graph.contains_name(candidate) || self.graph.nodes().any(|(_, n)| n.name.starts_with(&p))
        };
        if !taken(&prefix) {
            return base.to_string();
        }
        (1..).map(|i| format!("{base}_{i}")).find(|b| !taken(&self.prefixed(b))).unwrap_or_default()
    }

    pub(crate) fn prefixed(&self, base: &str) -> String {
        if self.scope.is_empty() { base.to_string() } else { format!("{}/{}", self.scope.join("/"), base) }
    }

    /// The full, unique node name for `base` in the current scope.
    pub fn name(&self, base: &str) -> String {
        self.graph.unique_name(&self.prefixed(base))
    }

    /// Adds a node named after its op type and returns its first output.
    pub fn op(&mut self, op: Op, inputs: &[Outlet]) -> Result<Outlet> {
        let name = self.name(op.name());
        self.op_named(&name, op, inputs)
    }

    /// Adds a node with an exact name (not uniquified) and returns its first output.
    pub fn op_named(&mut self, name: &str, op: Op, inputs: &[Outlet]) -> Result<Outlet> {
        Ok(Outlet::from(self.node_named(name, op, inputs)?))
    }

    /// Adds a node under `base` in the current scope and returns its id (multi-output ops).
    pub fn node(&mut self, base: &str, op: Op, inputs: &[Outlet]) -> Result<NodeId> {
        let name = self.name(base);
        self.node_named(&name, op, inputs)
    }

    pub fn node_named(&mut self, name: &str, op: Op, inputs: &[Outlet]) -> Result<NodeId> {
        self.graph.add_node(name, op, inputs.to_vec())
    }
}
