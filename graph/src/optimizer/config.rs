//! What a job says about its optimizer.

use serde::{Deserialize, Serialize};

/// A learning rate: a constant or a schedule of the global step (TensorFlow's
/// `tf.compat.v1.train.*_decay` semantics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LearningRate {
    Constant(f32),
    /// `initial * decay_rate ^ (step / decay_steps)`, the exponent floored if `staircase`.
    ExponentialDecay {
        initial: f32,
        decay_steps: u64,
        decay_rate: f32,
        staircase: bool,
    },
    /// `values[i]` while `boundaries[i-1] < step <= boundaries[i]`.
    PiecewiseConstant {
        boundaries: Vec<i64>,
        values: Vec<f32>,
    },
    /// `initial * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps)) + alpha)`.
    CosineDecay {
        initial: f32,
        decay_steps: u64,
        alpha: f32,
    },
    /// From `initial` at step 0 linearly up to `then(steps)` at step `steps`, then
    /// `then(step)` (TensorFlow Model Garden's `LinearWarmup`): transformers trained with
    /// Adam diverge early without it.
    LinearWarmup {
        steps: u64,
        initial: f32,
        then: Box<LearningRate>,
    },
    /// `then(step)` times the variable `learning_rate_scale` (1 at first), never below
    /// `min_lr` unless `then` is: the rate Keras' `ReduceLROnPlateau` lowers. The scale is a
    /// variable, so a checkpoint keeps the reductions and a resumed run goes on from them.
    ReducedOnPlateau {
        then: Box<LearningRate>,
        min_lr: f32,
    },
}

/// The variable of [`LearningRate::ReducedOnPlateau`] that the hook assigns.
pub const LEARNING_RATE_SCALE: &str = "learning_rate_scale";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Optimizer {
    /// Plain SGD when `momentum` is 0; TensorFlow's MomentumOptimizer otherwise.
    Sgd {
        momentum: f32,
        nesterov: bool,
    },
    Adam {
        beta1: f32,
        beta2: f32,
        epsilon: f32,
    },
    /// Adam with decoupled weight decay (Loshchilov & Hutter; Keras' `AdamW`): each step
    /// also subtracts `learning_rate * weight_decay * variable`, outside the adaptive
    /// scaling, so the decay is not weakened where gradients are large.
    AdamW {
        beta1: f32,
        beta2: f32,
        epsilon: f32,
        weight_decay: f32,
    },
    RmsProp {
        decay: f32,
        momentum: f32,
        epsilon: f32,
        centered: bool,
        /// Keras' form (`tf.keras.optimizers.RMSprop`): the mean square starts at zero and
        /// epsilon is added after the root. TensorFlow 1's (`tf.train.RMSPropOptimizer`,
        /// the Estimator's) otherwise: it starts at one, epsilon inside the root.
        #[serde(default)]
        keras: bool,
    },
    Adagrad {
        initial_accumulator: f32,
        epsilon: f32,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimizerConfig {
    pub optimizer: Optimizer,
    pub learning_rate: LearningRate,
    /// Scale all gradients down so their global norm is at most this.
    pub clip_global_norm: Option<f32>,
}

impl OptimizerConfig {
    /// Plain SGD at a constant learning rate.
    pub fn sgd(learning_rate: f32) -> Self {
        Self::constant(Optimizer::Sgd { momentum: 0.0, nesterov: false }, learning_rate)
    }

    /// Adam with Keras' defaults (beta1 0.9, beta2 0.999, epsilon 1e-7) at a constant rate.
    pub fn adam(learning_rate: f32) -> Self {
        Self::constant(Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 }, learning_rate)
    }

    /// `optimizer` at a constant learning rate, gradients unclipped.
    pub fn constant(optimizer: Optimizer, learning_rate: f32) -> Self {
        OptimizerConfig { optimizer, learning_rate: LearningRate::Constant(learning_rate), clip_global_norm: None }
    }
}

impl Optimizer {
    /// Whether a row-sparse gradient (an embedding's) changes only the rows it names, as
    /// TensorFlow 1's sparse apply ops do for momentum and RMSProp: the untouched rows'
    /// accumulators neither decay nor move their weights. Plain SGD and Adagrad change
    /// nothing where the gradient is zero anyway. Adam's sparse form in TensorFlow (and
    /// Keras) decays both moments of every row and updates every row, so it stays dense.
    pub fn updates_touched_rows_only(&self) -> bool {
        match self {
            Optimizer::Sgd { momentum, .. } => *momentum != 0.0,
            Optimizer::RmsProp { .. } => true,
            Optimizer::Adam { .. } | Optimizer::AdamW { .. } | Optimizer::Adagrad { .. } => false,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => "GradientDescent",
            Optimizer::Sgd { .. } => "Momentum",
            Optimizer::Adam { .. } => "Adam",
            Optimizer::AdamW { .. } => "AdamW",
            Optimizer::RmsProp { .. } => "RMSProp",
            Optimizer::Adagrad { .. } => "Adagrad",
        }
    }
}
