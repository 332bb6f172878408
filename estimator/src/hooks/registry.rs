//! Hooks by name, with parameters, for job specs:
//! `hooks: [LoggingTensor(tensors: ["loss"], every_n_iter: 10), StopAtStep(last_step: 500)]`.

use super::{
    EarlyStoppingHook, LoggingTensorHook, Monitor, NanTensorHook, ProfilerHook, ProgressBarHook, ReduceLrOnPlateauHook,
    SessionRunHook, StepCounterHook, StopAtStepHook, StopCondition, SummarySaverHook,
};
use serde::Deserialize;

pub const HOOK_NAMES: [&str; 9] = [
    "LoggingTensor",
    "StopAtStep",
    "StepCounter",
    "SummarySaver",
    "NanTensor",
    "Profiler",
    "EarlyStopping",
    "ProgressBar",
    "ReduceLROnPlateau",
];

fn hundred() -> u64 {
    100
}

fn yes() -> bool {
    true
}

fn tenth() -> f64 {
    0.1
}

fn ten() -> u32 {
    10
}

fn min_delta() -> f64 {
    1e-4
}

/// Keras' `mode`; `auto` when left out.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub enum Mode {
    #[serde(rename = "min")]
    Min,
    #[serde(rename = "max")]
    Max,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum HookConfig {
    LoggingTensor {
        tensors: Vec<String>,
        #[serde(default = "hundred")]
        every_n_iter: u64,
    },
    StopAtStep {
        last_step: u64,
    },
    StepCounter {
        #[serde(default = "hundred")]
        every_n_steps: u64,
    },
    SummarySaver {
        #[serde(default = "hundred")]
        save_steps: u64,
        #[serde(default)]
        histograms: bool,
    },
    NanTensor {
        #[serde(default = "yes")]
        fail_on_nan: bool,
    },
    Profiler {
        first_step: u64,
        last_step: u64,
    },
    EarlyStopping {
        metric: String,
        #[serde(default)]
        max_steps_without_decrease: Option<u64>,
        #[serde(default)]
        max_steps_without_increase: Option<u64>,
        #[serde(default)]
        higher_than: Option<f64>,
        #[serde(default)]
        lower_than: Option<f64>,
        #[serde(default)]
        eval_dir: Option<String>,
        #[serde(default)]
        min_steps: u64,
        #[serde(default = "hundred")]
        run_every_steps: u64,
        #[serde(default)]
        restore_best_weights: bool,
    },
    /// Keras' callback; the job's learning rate becomes `ReducedOnPlateau` with `min_lr`.
    ReduceLROnPlateau {
        metric: String,
        #[serde(default = "tenth")]
        factor: f64,
        #[serde(default = "ten")]
        patience: u32,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default = "min_delta")]
        min_delta: f64,
        #[serde(default)]
        cooldown: u32,
        #[serde(default)]
        min_lr: f32,
        #[serde(default)]
        eval_dir: Option<String>,
        #[serde(default = "hundred")]
        run_every_steps: u64,
    },
    /// Training shows one by default on a terminal; this sets where it ends (`None`: the
    /// run's last step when it has one, else a counter).
    ProgressBar {
        #[serde(default)]
        last_step: Option<u64>,
    },
}

/// Builds the hook a config names. Early stopping needs exactly one condition.
pub fn hook_from_config(config: &HookConfig) -> Result<Box<dyn SessionRunHook>, String> {
    Ok(match config {
        HookConfig::LoggingTensor { tensors, every_n_iter } => {
            let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
            Box::new(LoggingTensorHook::new(&names, *every_n_iter))
        }
        HookConfig::StopAtStep { last_step } => Box::new(StopAtStepHook::at(*last_step)),
        HookConfig::StepCounter { every_n_steps } => Box::new(StepCounterHook::new(*every_n_steps)),
        HookConfig::SummarySaver { save_steps, histograms } => {
            Box::new(SummarySaverHook::new(*save_steps, *histograms))
        }
        HookConfig::NanTensor { fail_on_nan } => Box::new(NanTensorHook::new("loss", *fail_on_nan)),
        HookConfig::Profiler { first_step, last_step } => Box::new(ProfilerHook::steps(*first_step, *last_step)),
        HookConfig::ReduceLROnPlateau {
            metric,
            factor,
            patience,
            mode,
            min_delta,
            cooldown,
            min_lr,
            eval_dir,
            run_every_steps,
        } => {
            if !(factor.is_finite() && *factor > 0.0 && *factor < 1.0) {
                return Err(format!("ReduceLROnPlateau's factor must be in (0, 1), found {factor}"));
            }
            if *patience == 0 {
                return Err("ReduceLROnPlateau's patience must be at least one evaluation".into());
            }
            if !(min_delta.is_finite() && *min_delta >= 0.0 && min_lr.is_finite() && *min_lr >= 0.0) {
                return Err("ReduceLROnPlateau's min_delta and min_lr must be >= 0".into());
            }
            let mut hook = ReduceLrOnPlateauHook::new(metric, *factor, *patience)
                .min_delta(*min_delta)
                .cooldown(*cooldown)
                .eval_dir(eval_dir.as_deref().unwrap_or("eval"))
                .run_every_steps(*run_every_steps);
            if let Some(mode) = mode {
                hook = hook.monitor(match mode {
                    Mode::Min => Monitor::Min,
                    Mode::Max => Monitor::Max,
                });
            }
            Box::new(hook)
        }
        HookConfig::ProgressBar { last_step } => Box::new(ProgressBarHook::new(*last_step)),
        HookConfig::EarlyStopping {
            metric,
            max_steps_without_decrease,
            max_steps_without_increase,
            higher_than,
            lower_than,
            eval_dir,
            min_steps,
            run_every_steps,
            restore_best_weights,
        } => {
            let conditions: Vec<StopCondition> = [
                max_steps_without_decrease.map(|n| StopCondition::NoDecrease { max_steps_without_decrease: n }),
                max_steps_without_increase.map(|n| StopCondition::NoIncrease { max_steps_without_increase: n }),
                higher_than.map(|t| StopCondition::Higher { threshold: t }),
                lower_than.map(|t| StopCondition::Lower { threshold: t }),
            ]
            .into_iter()
            .flatten()
            .collect();
            let [condition] = conditions.as_slice() else {
                return Err("EarlyStopping needs exactly one of max_steps_without_decrease, max_steps_without_increase, higher_than, lower_than".into());
            };
            let dir = eval_dir.clone().unwrap_or_else(|| "eval".into());
            let hook = EarlyStoppingHook::new(metric, condition.clone(), &dir, *min_steps, *run_every_steps);
            Box::new(if *restore_best_weights { hook.restore_best_weights() } else { hook })
        }
    })
}
