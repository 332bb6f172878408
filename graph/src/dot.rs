//! Graphviz rendering, with devices drawn as clusters.

use crate::{Graph, NodeId};
use std::collections::BTreeMap;
use std::fmt::Write;

impl Graph {
    /// The graph in Graphviz's dot language. Nodes placed on a device are grouped in a
    /// cluster per device; edges are labelled with the fact they carry.
    pub fn to_dot(&self) -> String {
        let mut s = String::from(
            "digraph engine {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n",
        );
        let mut clusters: BTreeMap<String, Vec<NodeId>> = BTreeMap::new();
        let mut loose = Vec::new();
        for (id, n) in self.nodes() {
            match n.placement {
                Some(p) => clusters.entry(p.to_string()).or_default().push(id),
                None => loose.push(id),
            }
        }
        for (i, (device, ids)) in clusters.iter().enumerate() {
            let _ =
                writeln!(s, "  subgraph cluster_{i} {{\n    label=\"{}\"; style=rounded; color=grey;", escape(device));
            for id in ids {
                self.dot_node(&mut s, *id, "    ");
            }
            s.push_str("  }\n");
        }
        for id in loose {
            self.dot_node(&mut s, id, "  ");
        }
        for (id, n) in self.nodes() {
            for o in &n.inputs {
                let fact = self.fact(*o).map(|f| f.to_string()).unwrap_or_default();
                let _ = writeln!(s, "  n{} -> n{} [label=\"{}\"];", o.node.index(), id.index(), escape(&fact));
            }
        }
        s.push_str("}\n");
        s
    }

    fn dot_node(&self, s: &mut String, id: NodeId, indent: &str) {
        let n = self.node(id);
        let style = match n.op.name() {
            "VariableV2" => ", style=filled, fillcolor=\"#fde68a\"",
            "Placeholder" => ", style=filled, fillcolor=\"#bfdbfe\"",
            "Assign" => ", style=filled, fillcolor=\"#fecaca\"",
            name if name.starts_with("Collective") || name.starts_with("AllReduce") => {
                ", style=filled, fillcolor=\"#bbf7d0\""
            }
            _ => "",
        };
        let _ = writeln!(s, "{indent}n{} [label=\"{}\\n{}\"{style}];", id.index(), escape(&n.name), n.op.name());
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
