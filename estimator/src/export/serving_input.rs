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
}

impl ServingInput {
    pub fn new(features: Vec<FeatureInfo>) -> Self {
        ServingInput { features }
    }

    /// The features of `input_fn`'s dataset in prediction mode (the label, if any, is not
    /// part of a request).
    pub fn from_input_fn(input_fn: &dyn InputFn) -> Result<Self> {
        let dataset = input_fn.dataset(Mode::Predict, &InputContext::default())?;
        Ok(ServingInput { features: dataset.schema()?.features })
    }
}
