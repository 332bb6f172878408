//! Logs tensors every N steps (TensorFlow's LoggingTensorHook): `loss = 0.31, step = 200
//! (0.514 sec)`.

use super::{HookContext, RunArgs, RunValues, SessionRunHook};
use crate::Result;
use std::time::Instant;

pub struct LoggingTensorHook {
    tensors: Vec<String>,
    every_n_iter: u64,
    last: Option<Instant>,
    due: bool,
}

impl LoggingTensorHook {
    pub fn new(tensors: &[&str], every_n_iter: u64) -> Self {
        LoggingTensorHook {
            tensors: tensors.iter().map(|s| s.to_string()).collect(),
            every_n_iter: every_n_iter.max(1),
            last: None,
            due: false,
        }
    }
}

impl SessionRunHook for LoggingTensorHook {
    fn name(&self) -> &str {
        "LoggingTensorHook"
    }
    fn required_tensors(&self) -> Vec<String> {
        self.tensors
            .iter()
            .filter(|t| !matches!(t.as_str(), "loss" | "global_step" | "learning_rate"))
            .cloned()
            .collect()
    }
    fn before_run(&mut self, ctx: &HookContext<'_>) -> Result<RunArgs> {
        self.due = ctx.global_step.is_multiple_of(self.every_n_iter);
        Ok(RunArgs { fetches: if self.due { self.tensors.clone() } else { Vec::new() }, profile: false })
    }
    fn after_run(&mut self, ctx: &HookContext<'_>, values: &RunValues) -> Result<()> {
        if !self.due {
            return Ok(());
        }
        let mut parts: Vec<String> = Vec::new();
        for name in &self.tensors {
            match values.results.get(name) {
                Some(t) if name == "global_step" => {
                    parts.push(format!("step = {}", t.scalar_value().unwrap_or(0.0) as i64))
                }
                Some(t) => match t.scalar_value() {
                    Some(v) => parts.push(format!("{name} = {v:.7}")),
                    None => parts.push(format!("{name} = {:?}", t.to_f64_vec())),
                },
                None => {}
            }
        }
        if !self.tensors.iter().any(|t| t == "global_step") {
            parts.push(format!("step = {}", ctx.global_step.saturating_sub(1)));
        }
        let now = Instant::now();
        let elapsed =
            self.last.map(|t| format!(" ({:.3} sec)", now.duration_since(t).as_secs_f64())).unwrap_or_default();
        self.last = Some(now);
        log::info!("{}{elapsed}", parts.join(", "));
        Ok(())
    }
}
