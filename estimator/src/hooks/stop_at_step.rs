//! Stops training at a global step (TensorFlow's StopAtStepHook).

use super::{HookContext, RunValues, SessionRunHook};
use crate::Result;

pub struct StopAtStepHook {
    last_step: u64,
}

impl StopAtStepHook {
    /// Stop once `global_step` reaches `last_step`.
    pub fn at(last_step: u64) -> Self {
        StopAtStepHook { last_step }
    }
}

impl SessionRunHook for StopAtStepHook {
    fn name(&self) -> &str {
        "StopAtStepHook"
    }
    fn after_create_session(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        if ctx.global_step >= self.last_step {
            ctx.request_stop();
        }
        Ok(())
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, _: &RunValues) -> Result<()> {
        if ctx.global_step >= self.last_step {
            ctx.request_stop();
        }
        Ok(())
    }
}
