//! Steps and examples per second, and the time steps spent waiting for input (TensorFlow's
//! StepCounterHook, plus the input wait that tells whether the pipeline keeps up).

use super::{HookContext, RunValues, SessionRunHook};
use crate::Result;
use std::time::{Duration, Instant};

pub struct StepCounterHook {
    every_n_steps: u64,
    window_start: Option<(Instant, u64)>,
    input_wait: Duration,
    step_time: Duration,
    collective_time: Duration,
    collective_wait: Duration,
    /// Device reads in the window and the steps they were counted over (GPU runs only).
    device_reads: u64,
    device_steps: u64,
    /// The last report: `(steps/s, examples/s, fraction of time blocked on input)`.
    pub last: Option<(f64, f64, f64)>,
}

impl StepCounterHook {
    pub fn new(every_n_steps: u64) -> Self {
        StepCounterHook {
            every_n_steps: every_n_steps.max(1),
            window_start: None,
            input_wait: Duration::ZERO,
            step_time: Duration::ZERO,
            collective_time: Duration::ZERO,
            collective_wait: Duration::ZERO,
            device_reads: 0,
            device_steps: 0,
            last: None,
        }
    }
}

impl SessionRunHook for StepCounterHook {
    fn name(&self) -> &str {
        "StepCounterHook"
    }
    fn after_create_session(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        self.window_start = Some((Instant::now(), ctx.global_step));
        Ok(())
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, values: &RunValues) -> Result<()> {
        self.input_wait += values.input_wait;
        self.step_time += values.step_time;
        for c in &values.collectives {
            self.collective_time += c.duration;
            self.collective_wait += c.waited;
        }
        if let Some(reads) = values.device_reads {
            self.device_reads += reads;
            self.device_steps += 1;
        }
        let Some((start, first_step)) = self.window_start else { return Ok(()) };
        let steps = ctx.global_step.saturating_sub(first_step);
        if steps < self.every_n_steps {
            return Ok(());
        }
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        let per_sec = steps as f64 / secs;
        let examples = per_sec * ctx.global_batch_size as f64;
        let busy = (self.input_wait + self.step_time).as_secs_f64().max(1e-9);
        let waiting = self.input_wait.as_secs_f64() / busy;
        log::info!(
            "global_step/sec: {per_sec:.4}, examples/sec: {examples:.1}, input wait: {:.3} ms/step ({:.1}%){}",
            self.input_wait.as_secs_f64() * 1000.0 / steps as f64,
            waiting * 100.0,
            reads_per_step(self.device_reads, self.device_steps)
        );
        if let Some(w) = ctx.summary
            && let Ok(mut w) = w.lock()
        {
            let step = ctx.global_step;
            w.scalars(
                step,
                &[("global_step/sec", per_sec), ("examples/sec", examples), ("input_wait_fraction", waiting)],
            )?;
        }
        if !self.collective_time.is_zero() {
            let overlapped = 1.0 - self.collective_wait.as_secs_f64() / self.collective_time.as_secs_f64();
            log::info!(
                "all-reduce: {:.3} ms/step, {:.1}% of it overlapped with computation",
                self.collective_time.as_secs_f64() * 1000.0 / steps as f64,
                overlapped * 100.0
            );
        }
        self.last = Some((per_sec, examples, waiting));
        self.window_start = Some((Instant::now(), ctx.global_step));
        self.input_wait = Duration::ZERO;
        self.step_time = Duration::ZERO;
        self.collective_time = Duration::ZERO;
        self.collective_wait = Duration::ZERO;
        self.device_reads = 0;
        self.device_steps = 0;
        Ok(())
    }
}

/// `, device reads: N/step` on a GPU (nothing on the CPU): how often a step waited for
/// the device, which a steady-state step does once.
fn reads_per_step(reads: u64, steps: u64) -> String {
    match steps {
        0 => String::new(),
        _ if reads.is_multiple_of(steps) => format!(", device reads: {}/step", reads / steps),
        _ => format!(", device reads: {:.2}/step", reads as f64 / steps as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::reads_per_step;

    #[test]
    fn reads_are_shown_per_step_on_devices_only() {
        assert_eq!(reads_per_step(0, 0), "");
        assert_eq!(reads_per_step(100, 100), ", device reads: 1/step");
        assert_eq!(reads_per_step(101, 100), ", device reads: 1.01/step");
    }
}
