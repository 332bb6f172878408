//! What a served model receives: TensorFlow's serving input receiver.

use crate::{InputFn, Mode, Result, input::FeatureInfo, input::InputContext};

/// The features a request carries, by name, dtype and per-example shape.
///
/// TensorFlow builds these with a `serving_input_receiver_fn`; here they are usually the
/// features of the evaluation input (what the model was evaluated on), read from its
/// schema, so the export takes exactly what `predict` would feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingInput {
    pub features: Vec<FeatureInfo>,
    /// The class names of a model trained on string labels (its label vocabulary): the
    /// export records them, and `engine serve` answers `classes` with them, as `engine
    /// predict` does.
    pub class_names: Option<Vec<String>>,
}

impl ServingInput {
    pub fn new(features: Vec<FeatureInfo>) -> Self {
        ServingInput { features, class_names: None }
    }

    /// With the names of the classes, by class id.
    pub fn with_class_names(mut self, names: Vec<String>) -> Self {
        self.class_names = Some(names);
        self
    }

    /// The features of `input_fn`'s dataset in prediction mode (the label, if any, is not
    /// part of a request).
    pub fn from_input_fn(input_fn: &dyn InputFn) -> Result<Self> {
        let dataset = input_fn.dataset(Mode::Predict, &InputContext::default())?;
        Ok(ServingInput { features: dataset.schema()?.features, class_names: None })
    }
}
