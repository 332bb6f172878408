//! A graph as data: what an export stores so that the engine can run a model without the
//! code (or spec) that built it, as TensorFlow's `GraphDef` does for a SavedModel.
//!
//! Nodes refer to their inputs by name, in a topological order, and carry no facts: loading
//! re-adds every node through [`Graph::add_node`], so shapes are inferred and checked again
//! and a tampered or truncated definition is refused with the node it breaks at.

use crate::{Graph, GraphError, NodeId, Op, Outlet, Result, Roles};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One output of a named node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutletDef {
    pub node: String,
    #[serde(default)]
    pub output: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeDef {
    pub name: String,
    pub op: Op,
    #[serde(default)]
    pub inputs: Vec<OutletDef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The node's placement, written as its name (`cpu:0`, `replica`, `ps:1`).
    pub device: Option<crate::Placement>,
}

/// The nodes in topological order and what their outputs mean.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphDef {
    pub nodes: Vec<NodeDef>,
    #[serde(default)]
    pub inputs: BTreeMap<String, OutletDef>,
    #[serde(default)]
    pub predictions: BTreeMap<String, OutletDef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<OutletDef>,
    #[serde(default)]
    pub fetches: BTreeMap<String, OutletDef>,
}

impl Graph {
    /// The graph as data. Gradients and the train op are left out: a definition describes
    /// what a graph computes, and training graphs are rebuilt from the model by the passes.
    pub fn to_def(&self) -> Result<GraphDef> {
        let outlet = |o: Outlet| OutletDef { node: self.node(o.node).name.clone(), output: o.output };
        let nodes = self
            .topological_order()?
            .into_iter()
            .map(|id| {
                let n = self.node(id);
                NodeDef {
                    name: n.name.clone(),
                    op: n.op.clone(),
                    inputs: n.inputs.iter().map(|o| outlet(*o)).collect(),
                    device: n.placement,
                }
            })
            .collect();
        let map = |m: &BTreeMap<String, Outlet>| m.iter().map(|(k, o)| (k.clone(), outlet(*o))).collect();
        Ok(GraphDef {
            nodes,
            inputs: map(&self.roles.inputs),
            predictions: map(&self.roles.predictions),
            loss: self.roles.loss.map(outlet),
            fetches: map(&self.roles.fetches),
        })
    }

    /// Rebuilds a graph, inferring and checking every node's facts again.
    pub fn from_def(def: &GraphDef) -> Result<Graph> {
        let mut g = Graph::new();
        let mut ids: BTreeMap<&str, NodeId> = BTreeMap::new();
        let resolve = |ids: &BTreeMap<&str, NodeId>, o: &OutletDef, at: &str| -> Result<Outlet> {
            ids.get(o.node.as_str()).map(|id| Outlet::new(*id, o.output)).ok_or_else(|| {
                GraphError::invalid(format!("'{at}'"), format!("it reads '{}', which is not defined before it", o.node))
            })
        };
        for n in &def.nodes {
            let inputs = n.inputs.iter().map(|o| resolve(&ids, o, &n.name)).collect::<Result<Vec<_>>>()?;
            let id = g.add_node(n.name.clone(), n.op.clone(), inputs)?;
            g.set_placement(id, n.device);
            ids.insert(n.name.as_str(), id);
        }
        let map = |m: &BTreeMap<String, OutletDef>, what: &str| -> Result<BTreeMap<String, Outlet>> {
            m.iter().map(|(k, o)| Ok((k.clone(), resolve(&ids, o, &format!("{what} '{k}'"))?))).collect()
        };
        let roles = Roles {
            inputs: map(&def.inputs, "input")?,
            predictions: map(&def.predictions, "prediction")?,
            loss: def.loss.as_ref().map(|o| resolve(&ids, o, "loss")).transpose()?,
            fetches: map(&def.fetches, "fetch")?,
            ..Roles::default()
        };
        for o in roles.outlets() {
            g.fact(o)?;
        }
        g.roles = roles;
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Graph, GraphBuilder, Initializer, Shape};

    #[test]
    fn a_definition_round_trips_through_json_and_is_checked_on_load() {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[4])).unwrap();
        let w = b.variable("w", &[4, 2], Initializer::GlorotUniform, true).unwrap();
        let y = b.matmul(x, w).unwrap();
        let p = b.softmax(y, -1).unwrap();
        g.roles.inputs.insert("x".into(), x);
        g.roles.predictions.insert("probabilities".into(), p);
        let def = g.to_def().unwrap();
        let json = serde_json::to_string(&def).unwrap();
        let back: super::GraphDef = serde_json::from_str(&json).unwrap();
        let h = Graph::from_def(&back).unwrap();
        assert_eq!(h.len(), g.len());
        assert_eq!(h.to_def().unwrap(), def);
        let out = h.roles.predictions["probabilities"];
        assert_eq!(h.fact(out).unwrap().shape.to_string(), "[N, 2]");

        // A reader of an undefined node, and a node whose shapes no longer agree.
        let mut bad = def.clone();
        bad.nodes.swap(0, 2);
        let e = Graph::from_def(&bad).unwrap_err().to_string();
        assert!(e.contains("not defined before it"), "{e}");
        let mut bad = def;
        if let crate::Op::Variable(v) = &mut bad.nodes.iter_mut().find(|n| n.name == "w").unwrap().op {
            v.shape = vec![3, 2];
        }
        let e = Graph::from_def(&bad).unwrap_err().to_string();
        assert!(e.contains("MatMul"), "{e}");
    }
}
