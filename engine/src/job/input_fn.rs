//! An input section as an input function.

use engine_estimator::{InputFn, Mode, input::{Dataset, InputContext, InputError, InputSpec}};

pub struct SpecInputFn {
    spec: InputSpec,
}

impl SpecInputFn {
    pub fn new(spec: InputSpec) -> Self {
        SpecInputFn { spec }
    }

    pub fn spec(&self) -> &InputSpec {
        &self.spec
    }
}

impl InputFn for SpecInputFn {
    fn dataset(&self, mode: Mode, ctx: &InputContext) -> Result<Dataset, InputError> {
        self.spec.build(mode.is_training(), ctx)
    }
}
