//! Fault injection, a testing aid for recovery: with
//! `ENGINE_FAULT_EXIT_AT_STEP=worker:1@12` in its environment, the cluster task `worker:1`
//! exits abruptly once its global step reaches 12, as a crashed process would: status
//! [`FAULT_EXIT_CODE`], no checkpoint, no destructors, so its peers see its connections
//! drop rather than a goodbye.
//!
//! It fires on a cluster's first start only: `engine launch` sets `ENGINE_RESTART_COUNT`
//! (0, then 1, 2, ... for each restart after a failure, as TorchElastic's
//! `TORCHELASTIC_RESTART_COUNT`), and a task with a count above 0 trains on. So one
//! variable makes a run fail once at a known step and then recover. Without the variable
//! nothing is armed; a process outside a cluster (no task name) ignores it.

use super::{HookContext, RunArgs, RunValues, SessionRunHook};
use crate::{EstimatorError, Result};
use engine_runtime::cluster::{Cluster, TaskId};

/// `TASK@STEP`: which task exits, at which global step.
pub const FAULT_ENV: &str = "ENGINE_FAULT_EXIT_AT_STEP";
/// How many times `engine launch` has restarted the cluster (0 on its first start).
pub const RESTART_COUNT_ENV: &str = "ENGINE_RESTART_COUNT";
/// The injected failure's exit status: one no other path exits with, so that a launcher's
/// report shows the failure was the injected one.
pub const FAULT_EXIT_CODE: i32 = 86;

/// Exits the process once the global step reaches `step`.
pub struct FaultInjectionHook {
    task: TaskId,
    step: u64,
    /// The global step before the step in flight: with ps tasks the global step moves by
    /// other tasks' updates too, so the hook fires when a step crosses `step`.
    before: Option<u64>,
}

impl FaultInjectionHook {
    /// The hook this process's environment arms, if any. A malformed value is an error
    /// rather than a test that silently never fails.
    pub fn from_env(cluster: Option<&Cluster>) -> Result<Option<Self>> {
        let Ok(value) = std::env::var(FAULT_ENV) else { return Ok(None) };
        let restarts = std::env::var(RESTART_COUNT_ENV).ok();
        Self::arm(&value, restarts.as_deref(), cluster.map(|c| c.task()))
    }

    fn arm(value: &str, restarts: Option<&str>, task: Option<TaskId>) -> Result<Option<Self>> {
        let bad = |why: &str| {
            EstimatorError::Config(format!("{FAULT_ENV}={value}: {why} (expected TASK@STEP, e.g. worker:1@12)"))
        };
        let (target, step) = value.split_once('@').ok_or_else(|| bad("no '@'"))?;
        let target: TaskId = target.parse().map_err(|e| bad(&format!("{e}")))?;
        let step: u64 = step.parse().map_err(|_| bad("the step is not a number"))?;
        let restarts: u64 = match restarts {
            None => 0,
            Some(n) => {
                n.parse().map_err(|_| EstimatorError::Config(format!("{RESTART_COUNT_ENV}={n} is not a number")))?
            }
        };
        let Some(task) = task else {
            log::warn!("{FAULT_ENV}={value} ignored: this process is not a cluster task");
            return Ok(None);
        };
        if task != target || restarts > 0 {
            return Ok(None);
        }
        log::warn!("{FAULT_ENV}: {task} will exit with status {FAULT_EXIT_CODE} at step {step}");
        Ok(Some(FaultInjectionHook { task, step, before: None }))
    }
}

impl SessionRunHook for FaultInjectionHook {
    fn name(&self) -> &str {
        "FaultInjectionHook"
    }
    fn before_run(&mut self, ctx: &HookContext<'_>) -> Result<RunArgs> {
        self.before = Some(ctx.global_step);
        Ok(RunArgs::default())
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, _: &RunValues) -> Result<()> {
        if self.before.is_some_and(|b| b < self.step) && ctx.global_step >= self.step {
            log::error!("{FAULT_ENV}: {} exits at step {} (injected fault)", self.task, self.step);
            std::process::exit(FAULT_EXIT_CODE);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(s: &str) -> Option<TaskId> {
        s.parse().ok()
    }

    #[test]
    fn it_arms_on_the_named_task_at_the_first_start_only() -> Result<()> {
        let hook = FaultInjectionHook::arm("worker:1@12", None, task("worker:1"))?;
        assert!(hook.as_ref().is_some_and(|h| h.step == 12 && Some(&h.task) == task("worker:1").as_ref()));
        assert!(FaultInjectionHook::arm("worker:1@12", Some("0"), task("worker:1"))?.is_some());
        assert!(FaultInjectionHook::arm("worker:1@12", Some("1"), task("worker:1"))?.is_none());
        assert!(FaultInjectionHook::arm("worker:1@12", None, task("worker:0"))?.is_none());
        assert!(FaultInjectionHook::arm("worker:1@12", None, None)?.is_none());
        Ok(())
    }

    #[test]
    fn malformed_values_are_errors() {
        for value in ["worker:1", "worker:1@x", "nobody@3"] {
            let err =
                FaultInjectionHook::arm(value, None, task("worker:1")).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(FAULT_ENV) && err.contains(value), "{value}: {err}");
        }
        let err = FaultInjectionHook::arm("worker:1@3", Some("two"), task("worker:1"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(RESTART_COUNT_ENV), "{err}");
    }
}
