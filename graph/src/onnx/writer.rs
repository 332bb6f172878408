//! Accumulates ONNX nodes and initializers under unique value names.

use super::proto::{
    AttributeProto, Dimension, NodeProto, TensorProto, TensorShapeProto, TensorTypeProto, TypeProto, ValueInfoProto,
    attribute_type, data_type,
};
use crate::{DType, Dim, Fact, HostData, HostTensor};
use std::collections::HashSet;

/// An attribute of a node.
pub(super) enum Attr {
    Float(f32),
    Int(i64),
    Ints(Vec<i64>),
}

#[derive(Default)]
pub(super) struct Writer {
    pub nodes: Vec<NodeProto>,
    pub initializers: Vec<TensorProto>,
    used: HashSet<String>,
}

impl Writer {
    /// Reserves `name`, or a suffixed variant if it is taken; returns what was reserved.
    pub fn fresh(&mut self, name: &str) -> String {
        let mut candidate = name.to_string();
        let mut k = 1;
        while !self.used.insert(candidate.clone()) {
            candidate = format!("{name}_{k}");
            k += 1;
        }
        candidate
    }

    /// Adds a node whose single output gets a fresh name derived from `name`.
    pub fn node(&mut self, op_type: &str, name: &str, inputs: Vec<String>, attrs: Vec<(&str, Attr)>) -> String {
        let out = self.fresh(name);
        self.node_into(op_type, name, inputs, vec![out.clone()], attrs);
        out
    }

    /// Adds a node with outputs already reserved.
    pub fn node_into(
        &mut self,
        op_type: &str,
        name: &str,
        inputs: Vec<String>,
        outputs: Vec<String>,
        attrs: Vec<(&str, Attr)>,
    ) {
        let attribute = attrs
            .into_iter()
            .map(|(n, a)| {
                let mut p = AttributeProto { name: n.to_string(), ..Default::default() };
                match a {
                    Attr::Float(f) => (p.f, p.r#type) = (f, attribute_type::FLOAT),
                    Attr::Int(i) => (p.i, p.r#type) = (i, attribute_type::INT),
                    Attr::Ints(v) => (p.ints, p.r#type) = (v, attribute_type::INTS),
                }
                p
            })
            .collect();
        let node_name = format!("{name}#{}", self.nodes.len());
        self.nodes.push(NodeProto {
            input: inputs,
            output: outputs,
            name: node_name,
            op_type: op_type.to_string(),
            attribute,
            ..Default::default()
        });
    }

    /// Adds an initializer under a fresh name derived from `name`.
    pub fn initializer(&mut self, name: &str, t: &HostTensor) -> String {
        let name = self.fresh(name);
        self.initializers.push(tensor_proto(&name, t));
        name
    }

    pub fn ints(&mut self, name: &str, values: &[i64]) -> String {
        let t = HostTensor { shape: vec![values.len()], data: HostData::I64(values.to_vec()) };
        self.initializer(name, &t)
    }
}

pub(super) fn tensor_proto(name: &str, t: &HostTensor) -> TensorProto {
    let (data_type, raw_data) = match &t.data {
        HostData::F32(v) => (data_type::FLOAT, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        HostData::I64(v) => (data_type::INT64, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        HostData::Bool(v) => (data_type::BOOL, v.iter().map(|b| u8::from(*b)).collect()),
    };
    TensorProto { dims: t.shape.iter().map(|d| *d as i64).collect(), data_type, name: name.to_string(), raw_data }
}

pub(super) fn elem_type(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => data_type::FLOAT,
        DType::I64 => data_type::INT64,
        DType::Bool => data_type::BOOL,
    }
}

/// A typed value with the batch symbol as `N` (`k*N` dimensions get their own symbol).
pub(super) fn value_info(name: &str, fact: &Fact) -> ValueInfoProto {
    let dim = fact
        .shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Known(n) => Dimension { dim_value: Some(*n as i64), dim_param: None },
            Dim::Batch(1) => Dimension { dim_value: None, dim_param: Some("N".into()) },
            Dim::Batch(k) => Dimension { dim_value: None, dim_param: Some(format!("{k}N")) },
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto {
                elem_type: elem_type(fact.dtype),
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
        doc_string: String::new(),
    }
}
