//! A label the model has no output for, located in the spec.
//!
//! The class count lives in the data, the output width in the spec, and the two only meet
//! at the first step: there the runtime finds the label and the training loop the example
//! it came from. This adds the third place a user needs, the output layer's `units` in the
//! spec, so the error reads `spec.ron:41:13: model.layers[7].units: label 8 of the example
//! at ... is outside the model's 5 classes ...`.

use super::CliError;
use crate::spec::{ErrorKind, FieldPath, Layer, Model, Spec};
use engine_estimator::EstimatorError;
use engine_runtime::RuntimeError;

/// `e`, located at the spec's output layer when it is a label out of the model's range.
pub(super) fn locate(spec: &Spec, e: EstimatorError) -> CliError {
    let out_of_range = matches!(
        &e,
        EstimatorError::LabelOutOfRange { .. } | EstimatorError::Runtime(RuntimeError::LabelOutOfRange { .. })
    );
    match output_units(spec) {
        Some(path) if out_of_range => CliError::Spec(spec.error(path, ErrorKind::Invalid(e.to_string()))),
        _ => e.into(),
    }
}

/// Where the spec writes the width of the model's output (logits), when its output layer
/// is a `Dense`: `model.layers[i].units`, or `model.nodes[i].1.units` in a functional model.
fn output_units(spec: &Spec) -> Option<FieldPath> {
    let model = FieldPath::root().field("model");
    match &spec.job.model {
        Model::Sequential(s) => {
            let last = s.layers.len().checked_sub(1)?;
            matches!(s.layers[last], Layer::Dense(_)).then(|| model.field("layers").index(last).field("units"))
        }
        Model::Functional(f) => {
            let output = f.outputs.first()?;
            let (i, node) = f.nodes.iter().enumerate().find(|(_, n)| n.name() == output)?;
            matches!(node.layer(), Layer::Dense(_)).then(|| model.field("nodes").index(i).elem(1).field("units"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_points_at_the_output_layers_units() -> anyhow::Result<()> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../specs/fashion_mnist_mlp.ron");
        let spec = Spec::from_file(&path, &[])?;
        let e = EstimatorError::LabelOutOfRange { label: 8, classes: 5, example: "train-labels:3".into() };
        let text = locate(&spec, e).to_string();
        let units = output_units(&spec).map(|p| p.to_string()).unwrap_or_default();
        assert!(units.starts_with("model.layers[") && units.ends_with("].units"), "{units}");
        assert!(text.contains("fashion_mnist_mlp.ron:") && text.contains(&units), "{text}");
        assert!(
            text.contains("label 8 of the example at train-labels:3") && text.contains("at least 9 units"),
            "{text}"
        );
        Ok(())
    }
}
