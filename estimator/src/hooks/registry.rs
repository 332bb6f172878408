//! Hooks by name, with parameters, for job specs:
//! `hooks: [LoggingTensor(tensors: ["loss"], every_n_iter: 10), StopAtStep(last_step: 500)]`.

use super::{
    EarlyStoppingHook, LoggingTensorHook, NanTensorHook, ProfilerHook, ProgressBarHook, SessionRunHook,
    StepCounterHook, StopAtStepHook, StopCondition, SummarySaverHook,
};
use serde::Deserialize;

pub const HOOK_NAMES: [&str; 8] = [
    "LoggingTensor",
    "StopAtStep",
    "StepCounter",
    "SummarySaver",
    "NanTensor",
    "Profiler",
    "EarlyStopping",
    "ProgressBar",
];

fn hundred() -> u64 {
    100
}

fn yes() -> bool {
    true
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
