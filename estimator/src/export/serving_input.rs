//! What a served model receives: TensorFlow's serving input receiver.

use crate::{
    InputFn, Mode, Result,
    input::{FeatureInfo, InputContext, Map},
};

/// The features a request carries, by name, dtype and per-example shape.
///
/// TensorFlow builds these with a `serving_input_receiver_fn`; here they are usually the
/// features of the evaluation input (what the model was evaluated on), read from its
/// schema, so the export takes exactly what `predict` would feed.
#[derive(Debug, Clone, PartialEq)]
pub struct ServingInput {
    pub features: Vec<FeatureInfo>,
    /// The class names of a model trained on string labels (its label vocabulary): the
    /// export records them, and `engine serve` answers `classes` with them, as `engine
    /// predict` does.
    pub class_names: Option<Vec<String>>,
    /// The input's transforms of features that the export runs in its own graph, in order
    /// (`Scale`, `Normalize`): a request then carries what a client has (pixels in 0 to
    /// 255), not what the model was trained on, as a Keras model with its preprocessing
    /// layers does. Empty: requests carry the features as the model sees them.
    pub preprocessing: Vec<Map>,
}

impl ServingInput {
    pub fn new(features: Vec<FeatureInfo>) -> Self {
        ServingInput { features, class_names: None, preprocessing: Vec::new() }
    }

    /// With transforms the export runs before the model (see [`ServingInput::preprocessing`]);
    /// only `Scale` and `Normalize` keep a feature's name, dtype and shape, so only they are
    /// taken.
    pub fn with_preprocessing(mut self, maps: Vec<Map>) -> Result<Self> {
        if let Some(other) = maps.iter().find(|m| !matches!(m, Map::Scale(_) | Map::Normalize { .. })) {
            return Err(crate::EstimatorError::Other(format!(
                "an export runs Scale and Normalize before the model, not {other:?}"
            )));
        }
        self.preprocessing = maps;
        Ok(self)
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
        // A request carries no weights: those are for the loss.
        let features =
            dataset.schema()?.features.into_iter().filter(|f| f.name != crate::input::SAMPLE_WEIGHT).collect();
        Ok(ServingInput { features, class_names: None, preprocessing: Vec::new() })
    }
}
