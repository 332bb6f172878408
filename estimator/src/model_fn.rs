//! The model function and input function types of the Estimator API.

use crate::{
    EstimatorSpec, Mode, Result,
    input::{Dataset, InputContext, InputError},
};
use engine_graph::{GraphBuilder, Outlet};
use std::collections::BTreeMap;

/// The tensors an input function's dataset provides, as graph placeholders by name.
pub type Features = BTreeMap<String, Outlet>;

/// Hyper-parameters passed to the model function (TensorFlow's `params` dict).
pub type Params = serde_json::Value;

/// Builds the model's nodes for one mode: `model_fn(features, labels, mode, params, builder)`.
pub trait ModelFn: Send + Sync {
    fn build(
        &self,
        features: &Features,
        labels: Option<Outlet>,
        mode: Mode,
        params: &Params,
        b: &mut GraphBuilder<'_>,
    ) -> Result<EstimatorSpec>;
}

impl<F> ModelFn for F
where
    F: Fn(&Features, Option<Outlet>, Mode, &Params, &mut GraphBuilder<'_>) -> Result<EstimatorSpec> + Send + Sync,
{
    fn build(
        &self,
        features: &Features,
        labels: Option<Outlet>,
        mode: Mode,
        params: &Params,
        b: &mut GraphBuilder<'_>,
    ) -> Result<EstimatorSpec> {
        self(features, labels, mode, params, b)
    }
}

/// Makes the dataset for a mode and a pipeline: `input_fn(mode, input_context)`.
pub trait InputFn: Send + Sync {
    fn dataset(&self, mode: Mode, ctx: &InputContext) -> Result<Dataset, InputError>;
}

impl<F> InputFn for F
where
    F: Fn(Mode, &InputContext) -> Result<Dataset, InputError> + Send + Sync,
{
    fn dataset(&self, mode: Mode, ctx: &InputContext) -> Result<Dataset, InputError> {
        self(mode, ctx)
    }
}
