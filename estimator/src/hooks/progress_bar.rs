//! A progress bar on a terminal (nothing when stderr is redirected, so logs stay clean),
//! on by default in training. Log lines go through [`print_line`], which lifts the bar
//! while a line is written, so the two never collide.

use super::{HookContext, RunValues, SessionRunHook};
use crate::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::Mutex;

/// The bar on screen, if any: what [`print_line`] lifts.
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Writes one line to stderr above the progress bar (or plainly when there is none), in
/// one write so that other threads' lines cannot cut it.
pub fn print_line(line: &str) {
    let bar = ACTIVE.lock().ok().and_then(|b| b.clone());
    let write = || {
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    };
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

/// Evaluation's progress: its own bar when nothing else shows one (`engine eval`, an
/// evaluator task), else a message on training's bar (an evaluation between training
/// steps). Gone when dropped.
pub(crate) struct EvalProgress {
    own: Option<ProgressBar>,
    shared: Option<ProgressBar>,
    steps: Option<u64>,
}

impl EvalProgress {
    pub fn start(steps: Option<u64>) -> Self {
        let none = || EvalProgress { own: None, shared: None, steps };
        if !std::io::stderr().is_terminal() {
            return none();
        }
        let Ok(mut active) = ACTIVE.lock() else { return none() };
        if let Some(training) = active.as_ref() {
            return EvalProgress { own: None, shared: Some(training.clone()), steps };
        }
        let (bar, template) = match steps {
            Some(n) => (ProgressBar::new(n), "evaluating {bar:40} {pos}/{len} batches  {per_sec}  eta {eta}"),
            None => (ProgressBar::no_length(), "evaluating {spinner} batch {pos}  {per_sec}"),
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        *active = Some(bar.clone());
        EvalProgress { own: Some(bar), shared: None, steps }
    }

    pub fn batches_done(&self, batches: u64) {
        if let Some(bar) = &self.own {
            bar.set_position(batches);
        }
        if let Some(bar) = &self.shared {
            let of = self.steps.map(|n| format!("/{n}")).unwrap_or_default();
            bar.set_message(format!("  evaluating: batch {batches}{of}"));
        }
    }
}

impl Drop for EvalProgress {
    fn drop(&mut self) {
        if let Some(bar) = self.own.take() {
            bar.finish_and_clear();
            if let Ok(mut active) = ACTIVE.lock() {
                *active = None;
            }
        }
        if let Some(bar) = self.shared.take() {
            bar.set_message("");
        }
    }
}

pub struct ProgressBarHook {
    /// `None`: a counter with the rate, for runs without a last step.
    last_step: Option<u64>,
    bar: Option<ProgressBar>,
}

impl ProgressBarHook {
    pub fn new(last_step: Option<u64>) -> Self {
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
        let (bar, template) = match self.last_step {
            Some(last) => (ProgressBar::new(last), "{bar:40} {pos}/{len} steps  {per_sec}  eta {eta}{msg}"),
            None => (ProgressBar::no_length(), "{spinner} step {pos}  {per_sec}  {elapsed}{msg}"),
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_position(ctx.global_step);
        if let Ok(mut active) = ACTIVE.lock() {
            *active = Some(bar.clone());
        }
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
            if let Ok(mut active) = ACTIVE.lock() {
                *active = None;
            }
        }
        Ok(())
    }
}
