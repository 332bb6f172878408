//! The compiled plan as TensorFlow's `GraphDef`, for TensorBoard's Graphs tab.
//!
//! Hand-written `prost` messages with the field numbers of
//! `tensorflow/core/framework/{graph,node_def,attr_value,tensor_shape,versions}.proto`, the
//! subset TensorBoard draws: names (whose `/` scopes it folds into groups), op types, inputs,
//! devices and each node's output shapes (`_output_shapes`, the batch dimension as -1).

use engine_graph::{Dim, Graph};
use std::collections::HashMap;

/// `tensorflow.GraphDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphDef {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
    #[prost(message, optional, tag = "4")]
    pub versions: Option<VersionDef>,
}

/// `tensorflow.NodeDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub op: String,
    /// `node` or `node:k` for output `k > 0`.
    #[prost(string, repeated, tag = "3")]
    pub input: Vec<String>,
    #[prost(string, tag = "4")]
    pub device: String,
    #[prost(map = "string, message", tag = "5")]
    pub attr: HashMap<String, AttrValue>,
}

/// `tensorflow.AttrValue`, the `list` case of its `oneof`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttrValue {
    #[prost(message, optional, tag = "1")]
    pub list: Option<ListValue>,
}

/// `tensorflow.AttrValue.ListValue`, its shapes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    #[prost(message, repeated, tag = "7")]
    pub shape: Vec<TensorShapeProto>,
}

/// `tensorflow.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<ShapeDim>,
}

/// `tensorflow.TensorShapeProto.Dim`: -1 for a size known only at run time.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShapeDim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

/// `tensorflow.VersionDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionDef {
    #[prost(int32, tag = "1")]
    pub producer: i32,
}

/// Every node of `graph`, in topological order where the graph has one.
pub fn graph_def(graph: &Graph) -> GraphDef {
    let ids = graph.topological_order().unwrap_or_else(|_| graph.nodes().map(|(id, _)| id).collect());
    let node = ids
        .into_iter()
        .map(|id| {
            let n = graph.node(id);
            let input = n
                .inputs
                .iter()
                .map(|o| {
                    let src = &graph.node(o.node).name;
                    if o.output == 0 { src.clone() } else { format!("{src}:{}", o.output) }
                })
                .collect();
            let shapes = n
                .outputs
                .iter()
                .map(|f| TensorShapeProto {
                    dim: f
                        .shape
                        .dims()
                        .iter()
                        .map(|d| ShapeDim {
                            size: match d {
                                Dim::Known(k) => i64::try_from(*k).unwrap_or(-1),
                                Dim::Batch(_) => -1,
                            },
                        })
                        .collect(),
                })
                .collect();
            let attr =
                HashMap::from([("_output_shapes".to_string(), AttrValue { list: Some(ListValue { shape: shapes }) })]);
            NodeDef {
                name: n.name.clone(),
                op: n.op.name().to_string(),
                input,
                device: n.placement.map(|p| p.to_string()).unwrap_or_default(),
                attr,
            }
        })
        .collect();
    GraphDef { node, versions: Some(VersionDef { producer: 1 }) }
}
