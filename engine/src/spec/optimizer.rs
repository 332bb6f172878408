//! The optimizer section, with TensorFlow 1's defaults, mapped onto the graph crate's
//! optimizer configuration.

use engine_graph::optimizer::{LearningRate, Optimizer, OptimizerConfig};
use serde::{
    Deserialize, Deserializer,
    de::{self, EnumAccess, Visitor},
};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename = "Optimizer")]
pub enum OptimizerSpec {
    /// `GradientDescentOptimizer`, or `MomentumOptimizer` when `momentum` is set.
    #[serde(rename = "SGD", alias = "Sgd")]
    Sgd(Sgd),
    Adam(Adam),
    /// Keras' `AdamW` (decoupled weight decay), with Keras' defaults.
    AdamW(AdamW),
    #[serde(rename = "RMSprop", alias = "RmsProp")]
    RmsProp(RmsProp),
    Adagrad(Adagrad),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sgd {
    pub learning_rate: LearningRateSpec,
    #[serde(default)]
    pub momentum: f32,
    #[serde(default)]
    pub nesterov: bool,
    #[serde(default)]
    pub clip_global_norm: Option<f32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adam {
    #[serde(default = "adam_learning_rate")]
    pub learning_rate: LearningRateSpec,
    #[serde(default = "beta1")]
    pub beta1: f32,
    #[serde(default = "beta2")]
    pub beta2: f32,
    #[serde(default = "adam_epsilon")]
    pub epsilon: f32,
    #[serde(default)]
    pub clip_global_norm: Option<f32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdamW {
    #[serde(default = "adam_learning_rate")]
    pub learning_rate: LearningRateSpec,
    #[serde(default = "adamw_weight_decay")]
    pub weight_decay: f32,
    #[serde(default = "beta1")]
    pub beta1: f32,
    #[serde(default = "beta2")]
    pub beta2: f32,
    #[serde(default = "keras_epsilon")]
    pub epsilon: f32,
    #[serde(default)]
    pub clip_global_norm: Option<f32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsProp {
    pub learning_rate: LearningRateSpec,
    #[serde(default = "rmsprop_decay")]
    pub decay: f32,
    #[serde(default)]
    pub momentum: f32,
    #[serde(default = "rmsprop_epsilon")]
    pub epsilon: f32,
    #[serde(default)]
    pub centered: bool,
    /// Keras' form instead of TensorFlow 1's (see `Optimizer::RmsProp`).
    #[serde(default)]
    pub keras: bool,
    #[serde(default)]
    pub clip_global_norm: Option<f32>,
}

/// TensorFlow 1's `AdagradOptimizer` has no epsilon (`initial_accumulator` > 0 keeps the
/// division safe); one may be given for Keras' behaviour.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adagrad {
    pub learning_rate: LearningRateSpec,
    #[serde(default = "adagrad_initial_accumulator")]
    pub initial_accumulator: f32,
    #[serde(default)]
    pub epsilon: f32,
    #[serde(default)]
    pub clip_global_norm: Option<f32>,
}

impl OptimizerSpec {
    pub fn learning_rate(&self) -> &LearningRate {
        match self {
            OptimizerSpec::Sgd(o) => &o.learning_rate.0,
            OptimizerSpec::Adam(o) => &o.learning_rate.0,
            OptimizerSpec::AdamW(o) => &o.learning_rate.0,
            OptimizerSpec::RmsProp(o) => &o.learning_rate.0,
            OptimizerSpec::Adagrad(o) => &o.learning_rate.0,
        }
    }

    pub fn clip_global_norm(&self) -> Option<f32> {
        match self {
            OptimizerSpec::Sgd(o) => o.clip_global_norm,
            OptimizerSpec::Adam(o) => o.clip_global_norm,
            OptimizerSpec::AdamW(o) => o.clip_global_norm,
            OptimizerSpec::RmsProp(o) => o.clip_global_norm,
            OptimizerSpec::Adagrad(o) => o.clip_global_norm,
        }
    }

    /// What the optimizer pass takes.
    pub fn to_config(&self) -> OptimizerConfig {
        let optimizer = match self {
            OptimizerSpec::Sgd(o) => Optimizer::Sgd { momentum: o.momentum, nesterov: o.nesterov },
            OptimizerSpec::Adam(o) => Optimizer::Adam { beta1: o.beta1, beta2: o.beta2, epsilon: o.epsilon },
            OptimizerSpec::AdamW(o) => {
                Optimizer::AdamW { beta1: o.beta1, beta2: o.beta2, epsilon: o.epsilon, weight_decay: o.weight_decay }
            }
            OptimizerSpec::RmsProp(o) => Optimizer::RmsProp {
                decay: o.decay,
                momentum: o.momentum,
                epsilon: o.epsilon,
                centered: o.centered,
                keras: o.keras,
            },
            OptimizerSpec::Adagrad(o) => {
                Optimizer::Adagrad { initial_accumulator: o.initial_accumulator, epsilon: o.epsilon }
            }
        };
        OptimizerConfig {
            optimizer,
            learning_rate: self.learning_rate().clone(),
            clip_global_norm: self.clip_global_norm(),
        }
    }
}

/// A learning rate: a number, or a schedule of the global step.
#[derive(Debug, Clone, PartialEq)]
pub struct LearningRateSpec(pub LearningRate);

/// The schedules as written in a spec; `staircase` and `alpha` default as in TensorFlow.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename = "LearningRateSchedule", deny_unknown_fields)]
enum Schedule {
    ExponentialDecay {
        initial: f32,
        decay_steps: u64,
        decay_rate: f32,
        #[serde(default)]
        staircase: bool,
    },
    PiecewiseConstant {
        boundaries: Vec<i64>,
        values: Vec<f32>,
    },
    CosineDecay {
        initial: f32,
        decay_steps: u64,
        #[serde(default)]
        alpha: f32,
    },
    LinearWarmup {
        steps: u64,
        #[serde(default)]
        initial: f32,
        then: LearningRateSpec,
    },
}

const SCHEDULES: &[&str] = &["ExponentialDecay", "PiecewiseConstant", "CosineDecay", "LinearWarmup"];

impl<'de> Deserialize<'de> for LearningRateSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Asked for as an enum so that unknown schedule names list the valid ones; a
        // number reaches `visit_f64`.
        d.deserialize_enum("LearningRateSchedule", SCHEDULES, LearningRateVisitor)
    }
}

struct LearningRateVisitor;

impl<'de> Visitor<'de> for LearningRateVisitor {
    type Value = LearningRateSpec;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a number or a learning rate schedule (one of: {})", SCHEDULES.join(", "))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(LearningRateSpec(LearningRate::Constant(v as f32)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(LearningRateSpec(LearningRate::Constant(v as f32)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(LearningRateSpec(LearningRate::Constant(v as f32)))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        let schedule = Schedule::deserialize(de::value::EnumAccessDeserializer::new(data))?;
        Ok(LearningRateSpec(match schedule {
            Schedule::ExponentialDecay { initial, decay_steps, decay_rate, staircase } => {
                LearningRate::ExponentialDecay { initial, decay_steps, decay_rate, staircase }
            }
            Schedule::PiecewiseConstant { boundaries, values } => {
                LearningRate::PiecewiseConstant { boundaries, values }
            }
            Schedule::CosineDecay { initial, decay_steps, alpha } => {
                LearningRate::CosineDecay { initial, decay_steps, alpha }
            }
            Schedule::LinearWarmup { steps, initial, then } => {
                LearningRate::LinearWarmup { steps, initial, then: Box::new(then.0) }
            }
        }))
    }
}

fn adam_learning_rate() -> LearningRateSpec {
    LearningRateSpec(LearningRate::Constant(0.001))
}

fn beta1() -> f32 {
    0.9
}

fn beta2() -> f32 {
    0.999
}

fn adam_epsilon() -> f32 {
    1e-8
}

fn keras_epsilon() -> f32 {
    1e-7
}

fn adamw_weight_decay() -> f32 {
    0.004
}

fn rmsprop_decay() -> f32 {
    0.9
}

fn rmsprop_epsilon() -> f32 {
    1e-10
}

fn adagrad_initial_accumulator() -> f32 {
    0.1
}
