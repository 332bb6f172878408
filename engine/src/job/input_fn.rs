//! An input section as an input function.

use engine_estimator::{
    InputFn, Mode,
    input::{Dataset, InputContext, InputError, InputField, InputSpec},
};

/// An input section with its source opened (read, or indexed) once and its sizes checked
/// against the machine: every dataset the estimator asks for is built on that source.
pub struct SpecInputFn {
    spec: InputSpec,
    source: Dataset,
}

impl SpecInputFn {
    /// Opens the source and checks the section (`InputSpec::check`), then compiles the
    /// dataset of one input pipeline for `mode`, so that a batch larger than the data is
    /// refused here too; errors name the field.
    pub fn open(spec: InputSpec, mode: Mode, limits: &engine_estimator::Resources) -> Result<Self, InputError> {
        let source = spec.open()?;
        spec.check(&source, limits)?;
        let single = InputContext { num_input_pipelines: 1, input_pipeline_id: 0, num_replicas_in_sync: 1 };
        spec.build_from(&source, mode.is_training(), &single).and_then(|d| d.schema()).map_err(|e| match e {
            InputError::Sharding(_) => {
                InputError::Field { field: InputField::named("batch_size"), source: Box::new(e) }
            }
            other => other,
        })?;
        Ok(SpecInputFn { spec, source })
    }

    pub fn spec(&self) -> &InputSpec {
        &self.spec
    }

    /// The source's columns, before the section's maps.
    pub fn source_schema(&self) -> &engine_estimator::input::Schema {
        self.source.source_schema()
    }
}

impl InputFn for SpecInputFn {
    fn dataset(&self, mode: Mode, ctx: &InputContext) -> Result<Dataset, InputError> {
        self.spec.build_from(&self.source, mode.is_training(), ctx)
    }
}
