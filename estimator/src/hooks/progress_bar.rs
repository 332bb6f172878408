//! A progress bar on a terminal (nothing when output is redirected, so logs stay clean).

use super::{HookContext, RunValues, SessionRunHook};
use crate::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

pub struct ProgressBarHook {
    last_step: u64,
    bar: Option<ProgressBar>,
}

impl ProgressBarHook {
    pub fn new(last_step: u64) -> Self {
        ProgressBarHook { last_step, bar: None }
    }
}

impl SessionRunHook for ProgressBarHook {
    fn name(&self) -> &str {
        "ProgressBarHook"
    }
    fn after_create_session(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        if !std::io::stderr().is_terminal() {
            return Ok(());
        }
        let bar = ProgressBar::new(self.last_step);
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} steps  {per_sec}  eta {eta}") {
            bar.set_style(style);
        }
        bar.set_position(ctx.global_step);
        self.bar = Some(bar);
        Ok(())
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, _: &RunValues) -> Result<()> {
        if let Some(b) = &self.bar {
            b.set_position(ctx.global_step);
        }
        Ok(())
    }
    fn end(&mut self, _: &HookContext<'_>) -> Result<()> {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        Ok(())
    }
}
