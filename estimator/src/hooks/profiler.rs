//! Records op timings for a range of steps and writes them as a Chrome trace
//! (`timeline-<step>.json` in the model dir, openable in Perfetto or chrome://tracing),
//! like TensorFlow's ProfilerHook.

use super::{HookContext, RunArgs, RunValues, SessionRunHook};
use crate::{EstimatorError, Result};
use serde_json::json;

pub struct ProfilerHook {
    first_step: u64,
    last_step: u64,
    events: Vec<serde_json::Value>,
    clock_us: f64,
    active: bool,
    named_tracks: bool,
    /// Where the trace was written, once it was.
    pub written: Option<String>,
}

impl ProfilerHook {
    /// Profiles steps `first_step..=last_step`.
    pub fn steps(first_step: u64, last_step: u64) -> Self {
        ProfilerHook {
            first_step,
            last_step,
            events: Vec::new(),
            clock_us: 0.0,
            active: false,
            named_tracks: false,
            written: None,
        }
    }

    fn write(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        if self.events.is_empty() || self.written.is_some() {
            return Ok(());
        }
        let trace = json!({ "traceEvents": self.events, "displayTimeUnit": "ms" });
        let name = format!("timeline-{}.json", self.last_step);
        let bytes = serde_json::to_vec(&trace)
            .map_err(|e| EstimatorError::Hook { hook: "ProfilerHook".into(), reason: e.to_string() })?;
        ctx.model_dir.put(&name, bytes)?;
        log::info!(
            "Wrote the op profile of steps {} to {} to {}",
            self.first_step,
            self.last_step,
            ctx.model_dir.url_of(&name)
        );
        self.written = Some(name);
        Ok(())
    }
}

/// The timeline's two rows: what the host did (on a GPU, launching), and when each op's
/// kernels ran on the device's own clock.
const HOST_TRACK: u32 = 0;
const DEVICE_TRACK: u32 = 1;

/// One complete event ("X") of the trace, `start` counted from the step's start at `clock_us`.
fn span(
    name: &str,
    category: &str,
    track: u32,
    clock_us: f64,
    start: std::time::Duration,
    duration: std::time::Duration,
    args: serde_json::Value,
) -> serde_json::Value {
    json!({
        "name": name,
        "cat": category,
        "ph": "X",
        "ts": clock_us + start.as_secs_f64() * 1e6,
        "dur": duration.as_secs_f64() * 1e6,
        "pid": 0,
        "tid": track,
        "args": args,
    })
}

fn track_names() -> [serde_json::Value; 2] {
    let name = |tid: u32, name: &str| json!({ "name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": { "name": name } });
    [name(HOST_TRACK, "host"), name(DEVICE_TRACK, "device")]
}

impl SessionRunHook for ProfilerHook {
    fn name(&self) -> &str {
        "ProfilerHook"
    }
    fn before_run(&mut self, ctx: &HookContext<'_>) -> Result<RunArgs> {
        self.active = (self.first_step..=self.last_step).contains(&ctx.global_step);
        Ok(RunArgs { fetches: Vec::new(), profile: self.active })
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, values: &RunValues) -> Result<()> {
        if !self.active {
            return Ok(());
        }
        let step = ctx.global_step.saturating_sub(1);
        // Rows are named when there are two of them (on a device; the CPU has the host's).
        if !self.named_tracks && values.timings.iter().any(|t| t.device.is_some()) {
            self.events.extend(track_names());
            self.named_tracks = true;
        }
        for t in &values.timings {
            let args = json!({ "node": t.node, "step": step });
            self.events.push(span(t.op, "op", HOST_TRACK, self.clock_us, t.start, t.duration, args));
            if let Some(d) = t.device {
                let clock = if d.by_device { "device" } else { "system" };
                let args = json!({ "node": t.node, "step": step, "clock": clock });
                self.events.push(span(t.op, "device", DEVICE_TRACK, self.clock_us, d.start, d.duration, args));
            }
        }
        let device: f64 = values.timings.iter().filter_map(|t| t.device).map(|d| d.duration.as_secs_f64()).sum();
        if device > 0.0 {
            log::info!(
                "Profiled step {step}: its ops ran {:.3} ms on the device, the step took {:.3} ms",
                device * 1e3,
                values.step_time.as_secs_f64() * 1e3
            );
        }
        self.clock_us += values.step_time.as_secs_f64() * 1e6;
        if step >= self.last_step {
            self.write(ctx)?;
        }
        Ok(())
    }
    fn end(&mut self, ctx: &HookContext<'_>) -> Result<()> {
        self.write(ctx)
    }
}
