//! Writes training scalars to TensorBoard every N steps (TensorFlow's SummarySaverHook),
//! and optionally histograms of the variables.

use super::{HookContext, RunArgs, RunValues, SessionRunHook};
use crate::Result;

pub struct SummarySaverHook {
    every_n_steps: u64,
    scalars: Vec<String>,
    histograms: bool,
    due: bool,
}

impl SummarySaverHook {
    pub fn new(every_n_steps: u64, histograms: bool) -> Self {
        SummarySaverHook {
            every_n_steps: every_n_steps.max(1),
            scalars: vec!["loss".into(), "learning_rate".into()],
            histograms,
            due: false,
        }
    }
}

impl SessionRunHook for SummarySaverHook {
    fn name(&self) -> &str {
        "SummarySaverHook"
    }
    fn before_run(&mut self, ctx: &HookContext<'_>) -> Result<RunArgs> {
        self.due = ctx.summary.is_some() && ctx.global_step.is_multiple_of(self.every_n_steps);
        Ok(RunArgs { fetches: if self.due { self.scalars.clone() } else { Vec::new() }, profile: false })
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, values: &RunValues) -> Result<()> {
        let (true, Some(writer)) = (self.due, ctx.summary) else { return Ok(()) };
        // TensorFlow tags summaries with the step they describe.
        let step = ctx.global_step.saturating_sub(1);
        let variables = if self.histograms { Some(ctx.session.export_variables()?) } else { None };
        let Ok(mut w) = writer.lock() else { return Ok(()) };
        for name in &self.scalars {
            if let Some(v) = values.results.get(name).and_then(|t| t.scalar_value()) {
                w.scalar(name, step, v)?;
            }
        }
        for (name, t) in variables.iter().flatten() {
            if t.dtype() == engine_graph::DType::F32 {
                w.histogram_of_tensor(name, step, t)?;
            }
        }
        w.flush()?;
        Ok(())
    }
    fn end(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        if let Some(w) = ctx.summary
            && let Ok(mut w) = w.lock()
        {
            w.flush()?;
        }
        Ok(())
    }
}
