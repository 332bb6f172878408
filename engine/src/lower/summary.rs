//! `model.summary()`: every layer with its type, output shape and parameter count, then the
//! totals, so a Keras user sees the model they wrote before training it (`engine plan`,
//! and `engine plan --summary` alone).

use super::{LowerError, Mode, build_model};
use crate::spec::Spec;
use engine_graph::{Graph, GraphBuilder, Op, human_bytes};
use std::fmt;

/// One layer's row.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSummary {
    /// Keras' layer name (`conv2d`, `dense_1`), the scope of its variables.
    pub name: String,
    /// The type as a spec writes it (`Conv2D`).
    pub kind: &'static str,
    /// `[N, 26, 26, 32]`.
    pub output: String,
    pub params: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelSummary {
    pub layers: Vec<LayerSummary>,
    pub trainable: u64,
    pub non_trainable: u64,
    /// Bytes the parameters take (f32).
    pub bytes: usize,
}

/// The summary of the spec's model, built as prediction builds it (no optimizer slots, no
/// global step: the model's own parameters, as Keras counts them).
pub fn summary(spec: &Spec) -> Result<ModelSummary, LowerError> {
    let mut graph = Graph::new();
    let model = build_model(spec, Mode::Predict, &mut GraphBuilder::new(&mut graph), 0)?;
    let variables: Vec<(String, u64, bool)> = graph
        .variables()
        .into_iter()
        .filter_map(|id| {
            let node = graph.node(id);
            match &node.op {
                Op::Variable(v) => Some((node.name.clone(), v.shape.iter().product::<usize>() as u64, v.trainable)),
                _ => None,
            }
        })
        .collect();
    let layers = model
        .layers
        .iter()
        .map(|layer| {
            let scope = format!("{}/", layer.name);
            let params = variables.iter().filter(|(name, _, _)| name.starts_with(&scope)).map(|v| v.1).sum();
            let output = graph.fact(layer.output).map(|f| f.shape.to_string()).unwrap_or_default();
            LayerSummary { name: layer.name.clone(), kind: layer.kind, output, params }
        })
        .collect();
    let count = |trainable: bool| variables.iter().filter(|v| v.2 == trainable).map(|v| v.1).sum::<u64>();
    let (trainable, non_trainable) = (count(true), count(false));
    let bytes = usize::try_from(trainable + non_trainable).unwrap_or(usize::MAX).saturating_mul(4);
    Ok(ModelSummary { layers, trainable, non_trainable, bytes })
}

impl fmt::Display for ModelSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "model summary:")?;
        writeln!(f, "  {:<40} {:<24} {:>12}", "Layer (type)", "Output Shape", "Param #")?;
        for l in &self.layers {
            let layer = format!("{} ({})", l.name, l.kind);
            writeln!(f, "  {layer:<40} {:<24} {:>12}", l.output, l.params)?;
        }
        let total = self.trainable + self.non_trainable;
        writeln!(f, "  Total params: {total} ({})", human_bytes(self.bytes))?;
        writeln!(f, "  Trainable params: {}", self.trainable)?;
        writeln!(f, "  Non-trainable params: {}", self.non_trainable)
    }
}
