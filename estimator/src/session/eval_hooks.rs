//! Evaluation hooks: the same lifecycle as training's (`begin`, `after_create_session`,
//! `before_run`/`after_run` per batch group, `end`), once per evaluated checkpoint, as
//! TensorFlow runs `evaluation_hooks`. A hook's stop request ends the evaluation after the
//! current group; the metrics then cover the batches evaluated so far.

use crate::{
    Result,
    checkpoint::{Checkpoint, CheckpointManager},
    hooks::{HookContext, RunValues, SessionRunHook, SessionState},
    model_dir::ModelDir,
    session::EvalObserver,
};
use engine_graph::HostTensor;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

/// What evaluation hooks see as the session: the evaluated checkpoint's variables (the
/// replicas hold exactly those while evaluating).
struct EvalState<'c> {
    checkpoint: &'c Checkpoint,
    fingerprint: &'c str,
}

impl SessionState for EvalState<'_> {
    fn export_variables(&self) -> Result<BTreeMap<String, HostTensor>> {
        Ok(self.checkpoint.tensors.clone())
    }
    fn input_state(&self) -> String {
        "{}".into()
    }
    fn fingerprint(&self) -> String {
        self.fingerprint.to_string()
    }
    fn examples_seen(&self) -> u64 {
        self.checkpoint.meta.examples_seen.unwrap_or(0)
    }
}

/// Runs a list of hooks around one evaluation of `checkpoint`; `global_step` in their
/// context is the checkpoint's step throughout.
pub(crate) struct EvalHooks<'a> {
    pub hooks: &'a mut [Box<dyn SessionRunHook>],
    pub checkpoint: &'a Checkpoint,
    pub fingerprint: &'a str,
    pub model_dir: &'a ModelDir,
    pub checkpoints: &'a CheckpointManager,
    pub global_batch_size: usize,
    pub is_chief: bool,
    pub stop: Cell<bool>,
}

impl EvalHooks<'_> {
    fn each(&mut self, mut f: impl FnMut(&mut dyn SessionRunHook, &HookContext<'_>) -> Result<()>) -> Result<()> {
        let state = EvalState { checkpoint: self.checkpoint, fingerprint: self.fingerprint };
        let ctx = HookContext {
            global_step: self.checkpoint.step,
            is_chief: self.is_chief,
            model_dir: self.model_dir,
            checkpoints: self.checkpoints,
            summary: None,
            global_batch_size: self.global_batch_size,
            session: &state,
            stop: &self.stop,
            restore: &Cell::new(None),
            assign: &RefCell::new(BTreeMap::new()),
        };
        self.hooks.iter_mut().try_for_each(|h| f(h.as_mut(), &ctx))
    }

    /// `begin` and `after_create_session`: the eval graph is compiled and the checkpoint
    /// restored before hooks run.
    pub fn start(&mut self) -> Result<()> {
        self.each(|h, ctx| h.begin(ctx))?;
        self.each(|h, ctx| h.after_create_session(ctx))
    }

    pub fn end(&mut self) -> Result<()> {
        self.each(|h, ctx| h.end(ctx))
    }
}

impl EvalObserver for EvalHooks<'_> {
    fn before_batch(&mut self) -> Result<Vec<String>> {
        let mut fetches = Vec::new();
        self.each(|h, ctx| {
            fetches.extend(h.before_run(ctx)?.fetches);
            Ok(())
        })?;
        fetches.sort();
        fetches.dedup();
        Ok(fetches)
    }

    fn after_batch(&mut self, values: &RunValues) -> Result<bool> {
        self.each(|h, ctx| h.after_run(ctx, values))?;
        Ok(self.stop.get())
    }
}
