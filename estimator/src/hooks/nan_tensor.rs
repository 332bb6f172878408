//! Fails training when the loss becomes NaN, naming the step (TensorFlow's NanTensorHook).

use super::{HookContext, RunArgs, RunValues, SessionRunHook, scalar};
use crate::{EstimatorError, Result};

pub struct NanTensorHook {
    tensor: String,
    fail_on_nan: bool,
}

impl NanTensorHook {
    pub fn new(tensor: &str, fail_on_nan: bool) -> Self {
        NanTensorHook { tensor: tensor.to_string(), fail_on_nan }
    }
}

impl Default for NanTensorHook {
    fn default() -> Self {
        NanTensorHook::new("loss", true)
    }
}

impl SessionRunHook for NanTensorHook {
    fn name(&self) -> &str {
        "NanTensorHook"
    }
    fn before_run(&mut self, _: &HookContext<'_>) -> Result<RunArgs> {
        Ok(RunArgs { fetches: vec![self.tensor.clone()], profile: false })
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, values: &RunValues) -> Result<()> {
        if scalar(values, &self.tensor).is_some_and(f64::is_nan) {
            let step = ctx.global_step.saturating_sub(1);
            if self.fail_on_nan {
                return Err(EstimatorError::NanLoss { step });
            }
            log::error!("NaN {} at step {step}; stopping", self.tensor);
            ctx.request_stop();
        }
        Ok(())
    }
}
