//! The graph container: nodes with inferred facts, kept consistent.

use crate::{
    Edge, Fact, GraphError, Node, NodeId, Outlet, Result, Roles,
    ops::{Arity, Op},
};
use petgraph::{Direction, stable_graph::StableDiGraph, visit::EdgeRef};
use std::collections::{BTreeSet, HashMap};

/// A computation graph.
///
/// Every node is added through [`Graph::add_node`], which infers its output facts from its
/// inputs, so a shape mismatch is reported where it is made, naming the node. Names are
/// unique. `roles` says what the outputs mean (loss, predictions, gradients).
#[derive(Debug, Clone, Default)]
pub struct Graph {
    inner: StableDiGraph<Node, Edge>,
    by_name: HashMap<String, NodeId>,
    pub roles: Roles,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node, checking its arity and inferring its outputs.
    pub fn add_node(&mut self, name: impl Into<String>, op: Op, inputs: Vec<Outlet>) -> Result<NodeId> {
        let name = name.into();
        if self.by_name.contains_key(&name) {
            return Err(GraphError::DuplicateName(name));
        }
        let outputs = self.infer(&name, &op, &inputs)?;
        let id = self.inner.add_node(Node { name: name.clone(), op, inputs: inputs.clone(), outputs, placement: None });
        for (i, src) in inputs.iter().enumerate() {
            self.inner.add_edge(src.node, id, Edge { output: src.output, input: i });
        }
        self.by_name.insert(name, id);
        Ok(id)
    }

    /// Runs shape inference for `op` on `inputs` without adding anything.
    pub fn infer(&self, name: &str, op: &Op, inputs: &[Outlet]) -> Result<Vec<Fact>> {
        let ok = match op.arity() {
            Arity::Exact(n) => inputs.len() == n,
            Arity::AtLeast(n) => inputs.len() >= n,
        };
        if !ok {
            return Err(GraphError::Arity {
                node: name.to_string(),
                op: op.name(),
                expected: op.arity().to_string(),
                got: inputs.len(),
            });
        }
        let facts = inputs.iter().map(|o| self.fact(*o).cloned()).collect::<Result<Vec<_>>>()?;
        op.infer(&facts).map_err(|reason| GraphError::Shape {
            node: name.to_string(),
            op: op.name(),
            reason,
            inputs: facts,
        })
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.inner[id]
    }

    pub fn try_node(&self, id: NodeId) -> Option<&Node> {
        self.inner.node_weight(id)
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.inner.contains_node(id)
    }

    /// The fact of one output, or an error if the outlet does not exist.
    pub fn fact(&self, o: Outlet) -> Result<&Fact> {
        let node = self.inner.node_weight(o.node).ok_or_else(|| GraphError::UnknownNode(format!("{o}")))?;
        node.outputs.get(o.output).ok_or_else(|| GraphError::NoSuchOutput { node: node.name.clone(), output: o.output })
    }

    pub fn find(&self, name: &str) -> Result<NodeId> {
        self.by_name.get(name).copied().ok_or_else(|| GraphError::UnknownNode(name.to_string()))
    }

    pub fn contains_name(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Returns `base` if free, else `base_1`, `base_2`, ... (TensorFlow's uniquification).
    pub fn unique_name(&self, base: &str) -> String {
        if !self.by_name.contains_key(base) {
            return base.to_string();
        }
        (1..).map(|i| format!("{base}_{i}")).find(|n| !self.by_name.contains_key(n)).unwrap_or_default()
    }

    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.inner.node_indices()
    }

    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> + '_ {
        self.inner.node_indices().map(move |i| (i, &self.inner[i]))
    }

    pub fn len(&self) -> usize {
        self.inner.node_count()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.node_count() == 0
    }

    /// Consumers of any output of `id`, as `(consumer, input index, output index)`, in a
    /// deterministic order.
    pub fn consumers(&self, id: NodeId) -> Vec<(NodeId, usize, usize)> {
        let mut v: Vec<_> = self
            .inner
            .edges_directed(id, Direction::Outgoing)
            .map(|e| (e.target(), e.weight().input, e.weight().output))
            .collect();
        v.sort();
        v
    }

    /// Consumers of one outlet, as `(consumer, input index)`.
    pub fn outlet_consumers(&self, o: Outlet) -> Vec<(NodeId, usize)> {
        self.consumers(o.node).into_iter().filter(|c| c.2 == o.output).map(|c| (c.0, c.1)).collect()
    }

    pub fn set_placement(&mut self, id: NodeId, placement: Option<crate::Placement>) {
        self.inner[id].placement = placement;
    }

    /// Points every consumer (and role) of `old` at `new`. Facts must agree.
    pub fn replace_uses(&mut self, old: Outlet, new: Outlet) -> Result<()> {
        if self.fact(old)? != self.fact(new)? {
            return Err(GraphError::Inconsistent(format!(
                "cannot replace {} ({}) by {} ({}): facts differ",
                self.node(old.node).name,
                self.fact(old)?,
                self.node(new.node).name,
                self.fact(new)?
            )));
        }
        for (consumer, input) in self.outlet_consumers(old) {
            self.set_input(consumer, input, new);
        }
        self.roles.replace(old, new);
        Ok(())
    }

    /// Rewires one input of a node. The caller guarantees the fact is unchanged.
    pub fn set_input(&mut self, node: NodeId, input: usize, src: Outlet) {
        let stale: Vec<_> = self
            .inner
            .edges_directed(node, Direction::Incoming)
            .filter(|e| e.weight().input == input)
            .map(|e| e.id())
            .collect();
        for e in stale {
            self.inner.remove_edge(e);
        }
        self.inner.add_edge(src.node, node, Edge { output: src.output, input });
        self.inner[node].inputs[input] = src;
    }

    /// Gives a node another name, one no other node has.
    pub fn rename(&mut self, id: NodeId, name: impl Into<String>) -> Result<()> {
        let name = name.into();
        match self.by_name.get(&name) {
            Some(&other) if other == id => return Ok(()),
            Some(_) => return Err(GraphError::DuplicateName(name)),
            None => {}
        }
        let node = self.inner.node_weight_mut(id).ok_or_else(|| GraphError::UnknownNode(format!("#{}", id.index())))?;
        self.by_name.remove(&node.name);
        node.name = name.clone();
        self.by_name.insert(name, id);
        Ok(())
    }

    /// Removes a node that nothing consumes.
    pub fn remove_node(&mut self, id: NodeId) -> Result<Node> {
        if !self.consumers(id).is_empty() {
            return Err(GraphError::Inconsistent(format!("node '{}' still has consumers", self.node(id).name)));
        }
        let node = self.inner.remove_node(id).ok_or_else(|| GraphError::UnknownNode(format!("#{}", id.index())))?;
        self.by_name.remove(&node.name);
        Ok(node)
    }

    /// Nodes in a deterministic topological order (ties broken by insertion order).
    pub fn topological_order(&self) -> Result<Vec<NodeId>> {
        let mut indegree: HashMap<NodeId, usize> = HashMap::new();
        for id in self.inner.node_indices() {
            let distinct: BTreeSet<NodeId> = self.node(id).inputs.iter().map(|o| o.node).collect();
            indegree.insert(id, distinct.len());
        }
        let mut ready: BTreeSet<NodeId> = indegree.iter().filter(|(_, d)| **d == 0).map(|(i, _)| *i).collect();
        let mut order = Vec::with_capacity(self.len());
        while let Some(id) = ready.pop_first() {
            order.push(id);
            let targets: BTreeSet<NodeId> = self.consumers(id).into_iter().map(|c| c.0).collect();
            for t in targets {
                if let Some(d) = indegree.get_mut(&t) {
                    *d -= 1;
                    if *d == 0 {
                        ready.insert(t);
                    }
                }
            }
        }
        if order.len() != self.len() {
            let stuck = self.inner.node_indices().find(|i| !order.contains(i));
            return Err(GraphError::Cycle(stuck.map(|i| self.node(i).name.clone()).unwrap_or_default()));
        }
        Ok(order)
    }

    /// Verifies the invariants every pass must keep: edges mirror inputs, names are
    /// indexed, facts are what inference says, roles point at live outputs.
    pub fn check(&self) -> Result<()> {
        for (id, node) in self.nodes() {
            if self.by_name.get(&node.name) != Some(&id) {
                return Err(GraphError::Inconsistent(format!("name index misses '{}'", node.name)));
            }
            let mut from_edges: Vec<(usize, Outlet)> = self
                .inner
                .edges_directed(id, Direction::Incoming)
                .map(|e| (e.weight().input, Outlet::new(e.source(), e.weight().output)))
                .collect();
            from_edges.sort();
            let from_inputs: Vec<(usize, Outlet)> = node.inputs.iter().copied().enumerate().collect();
            if from_edges != from_inputs {
                return Err(GraphError::Inconsistent(format!("edges of '{}' disagree with its inputs", node.name)));
            }
            let inferred = self.infer(&node.name, &node.op, &node.inputs)?;
            if inferred != node.outputs {
                return Err(GraphError::Inconsistent(format!("facts of '{}' are stale", node.name)));
            }
        }
        if self.by_name.len() != self.len() {
            return Err(GraphError::Inconsistent("name index has stale entries".into()));
        }
        for o in self.roles.outlets() {
            self.fact(o)?;
        }
        for (var, _) in &self.roles.gradients {
            if !matches!(self.try_node(*var).map(|n| &n.op), Some(Op::Variable(_))) {
                return Err(GraphError::Inconsistent(format!("gradient role points at non-variable #{}", var.index())));
            }
        }
        self.topological_order()?;
        Ok(())
    }

    /// Trainable variables in insertion order.
    pub fn trainable_variables(&self) -> Vec<NodeId> {
        self.nodes().filter(|(_, n)| matches!(&n.op, Op::Variable(v) if v.trainable)).map(|(i, _)| i).collect()
    }

    /// Every variable (trainable, slots, global step) in insertion order.
    pub fn variables(&self) -> Vec<NodeId> {
        self.nodes().filter(|(_, n)| matches!(n.op, Op::Variable(_))).map(|(i, _)| i).collect()
    }
}
