//! Export of an inference graph to ONNX, the format other runtimes (onnxruntime, TensorRT,
//! OpenVINO, browsers) load.
//!
//! The exporter walks the optimized plan's graph, so what is exported is what the engine
//! runs (fused convolutions become `Conv` with a bias and an activation). The engine's
//! tensors are NHWC with HWIO filters; ONNX convolutions and pooling are NCHW with OIHW
//! weights, so each of them is wrapped in transposes (one per value, shared by every
//! consumer) and filters are stored transposed. Runtimes' layout optimizers remove the
//! transposes between consecutive convolutions. The batch dimension stays symbolic (`N`).
//!
//! An op without an ONNX form (training ops, collectives, dropout in an inference graph) is
//! refused with the node's name: a file is written whole or not at all.

mod lower;
pub mod proto;
mod writer;

use crate::{Graph, HostTensor, Result};
use std::collections::BTreeMap;

/// The ONNX operator set the exporter targets (ONNX 1.12, 2022; every current runtime).
pub const OPSET: i64 = 17;
/// The IR version that goes with [`OPSET`].
pub const IR_VERSION: i64 = 8;

/// What an export says about itself, beyond the graph.
#[derive(Debug, Clone, Default)]
pub struct OnnxOptions {
    /// The graph's name inside the model.
    pub graph_name: String,
    /// Written as `producer_version`.
    pub producer_version: String,
    /// Free-form `metadata_props` (checkpoint, global step, spec).
    pub metadata: BTreeMap<String, String>,
}

/// The serialized `ModelProto` of an inference graph whose variables hold `values`.
///
/// The graph's `roles.inputs` become the model's inputs and `roles.predictions` its outputs,
/// under the same names.
pub fn to_onnx(graph: &Graph, values: &BTreeMap<String, HostTensor>, options: &OnnxOptions) -> Result<Vec<u8>> {
    let model = lower::model(graph, values, options)?;
    Ok(prost::Message::encode_to_vec(&model))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Initializer, Shape};

    #[test]
    fn an_op_without_an_onnx_form_is_refused_with_its_node() {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[4])).unwrap();
        let w = b.variable("w", &[4, 2], Initializer::Zeros, true).unwrap();
        let y = b.matmul(x, w).unwrap();
        let d = b.with_scope("drop", |b| b.dropout(y, 0.5, 1)).unwrap();
        g.roles.inputs.insert("x".into(), x);
        g.roles.predictions.insert("logits".into(), d);
        let values = BTreeMap::from([("w".to_string(), HostTensor::f32(vec![4, 2], vec![0.0; 8]).unwrap())]);
        let e = to_onnx(&g, &values, &OnnxOptions::default()).unwrap_err().to_string();
        assert!(e.contains("drop/") && e.contains("dropout in an inference graph"), "{e}");

        // Without the dropout it exports; a missing variable value is named.
        g.roles.predictions.insert("logits".into(), y);
        assert!(!to_onnx(&g, &values, &OnnxOptions::default()).unwrap().is_empty());
        let e = to_onnx(&g, &BTreeMap::new(), &OnnxOptions::default()).unwrap_err().to_string();
        assert!(e.contains("'w'") && e.contains("no value"), "{e}");
    }
}
