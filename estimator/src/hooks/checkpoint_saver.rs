//! Saves checkpoints at session start, every N steps or seconds, and at the end
//! (TensorFlow's CheckpointSaverHook), calling listeners around each save.

use super::{HookContext, RunValues, SessionRunHook};
use crate::{
    Result,
    checkpoint::{CheckpointInfo, CheckpointMeta},
    run_config::CheckpointTrigger,
};
use std::time::Instant;

/// Called around every save. `after_save` returning `true` stops training (how
/// `train_and_evaluate` stops early after an evaluation).
pub trait CheckpointSaverListener: Send {
    fn begin(&mut self) -> Result<()> {
        Ok(())
    }
    fn before_save(&mut self, _ctx: &HookContext<'_>, _step: u64) -> Result<()> {
        Ok(())
    }
    fn after_save(&mut self, _ctx: &HookContext<'_>, _step: u64, _checkpoint: &CheckpointInfo) -> Result<bool> {
        Ok(false)
    }
    fn end(&mut self, _ctx: &HookContext<'_>, _step: u64) -> Result<()> {
        Ok(())
    }
}

pub struct CheckpointSaverHook<'l> {
    trigger: CheckpointTrigger,
    listeners: Vec<Box<dyn CheckpointSaverListener + 'l>>,
    last_time: Instant,
    last_step: Option<u64>,
}

impl<'l> CheckpointSaverHook<'l> {
    pub fn new(trigger: CheckpointTrigger, listeners: Vec<Box<dyn CheckpointSaverListener + 'l>>) -> Self {
        CheckpointSaverHook { trigger, listeners, last_time: Instant::now(), last_step: None }
    }

    fn due(&self, step: u64) -> bool {
        match self.trigger {
            CheckpointTrigger::Steps(n) => self.last_step.is_none_or(|last| step >= last + n),
            CheckpointTrigger::Secs(d) => self.last_time.elapsed() >= d,
        }
    }

    fn save(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        let step = ctx.global_step;
        for l in &mut self.listeners {
            l.before_save(ctx, step)?;
        }
        log::info!("Saving checkpoints for {step} into {}", ctx.model_dir.url_of("model.ckpt"));
        let variables = ctx.session.export_variables()?;
        let meta = CheckpointMeta {
            fingerprint: ctx.session.fingerprint(),
            input_state: ctx.session.input_state(),
            examples_seen: Some(ctx.session.examples_seen()),
        };
        let info = ctx.checkpoints.save(step, &variables, &meta)?;
        let gc = ctx.checkpoints.last_gc_report();
        for problem in &gc.problems {
            log::warn!("checkpoint garbage collection: {problem}");
        }
        self.last_step = Some(step);
        self.last_time = Instant::now();
        let mut stop = false;
        for l in &mut self.listeners {
            stop |= l.after_save(ctx, step, &info)?;
        }
        if stop {
            log::info!("A checkpoint listener requested that training be stopped");
            ctx.request_stop();
        }
        Ok(())
    }
}

impl SessionRunHook for CheckpointSaverHook<'_> {
    fn name(&self) -> &str {
        "CheckpointSaverHook"
    }
    fn begin(&mut self, _: &HookContext<'_>) -> Result<()> {
        for l in &mut self.listeners {
            l.begin()?;
        }
        Ok(())
    }
    fn after_create_session(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        // A fresh model dir gets `model.ckpt-0` at once, as TensorFlow does; a resumed run
        // already has the checkpoint it started from.
        let have = ctx.checkpoints.latest()?.is_some_and(|c| c.step == ctx.global_step);
        if have {
            self.last_step = Some(ctx.global_step);
            self.last_time = Instant::now();
            Ok(())
        } else {
            self.save(ctx)
        }
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, _: &RunValues) -> Result<()> {
        // Weights to be restored at the end are saved (and evaluated) then, not twice.
        if self.due(ctx.global_step) && ctx.restore_requested().is_none() { self.save(ctx) } else { Ok(()) }
    }
    fn end(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        // Restored weights differ from what a save at this step wrote: save them again.
        if self.last_step != Some(ctx.global_step) || ctx.restore_requested().is_some() {
            self.save(ctx)?;
        }
        for l in &mut self.listeners {
            l.end(ctx, ctx.global_step)?;
        }
        Ok(())
    }
}
