//! Learning-rate schedules as nodes reading the global step.

use super::{LEARNING_RATE_SCALE, LearningRate};
use crate::{DType, GraphBuilder, GraphError, Initializer, Outlet, Result, ops::source::Variable};

impl LearningRate {
    /// Wires the learning rate for the step `global_step` (read at the start of the step).
    pub fn build(&self, b: &mut GraphBuilder<'_>, global_step: Outlet) -> Result<Outlet> {
        b.with_scope("learning_rate", |b| {
            let step = b.cast(global_step, DType::F32)?;
            self.at(b, step)
        })
    }

    /// The rate at `step` (an f32 scalar), so that schedules can nest.
    fn at(&self, b: &mut GraphBuilder<'_>, step: Outlet) -> Result<Outlet> {
        {
            match self {
                LearningRate::Constant(lr) => b.scalar(*lr),
                LearningRate::ExponentialDecay { initial, decay_steps, decay_rate, staircase } => {
                    positive(*decay_steps, "decay_steps")?;
                    let steps = b.scalar(*decay_steps as f32)?;
                    let mut p = b.div(step, steps)?;
                    if *staircase {
                        // The step is non-negative, so truncation is floor.
                        let whole = b.cast(p, DType::I64)?;
                        p = b.cast(whole, DType::F32)?;
                    }
                    let ln_rate = b.scalar(decay_rate.ln())?;
                    let e = b.mul(p, ln_rate)?;
                    let factor = b.exp(e)?;
                    let init = b.scalar(*initial)?;
                    b.mul(init, factor)
                }
                LearningRate::PiecewiseConstant { boundaries, values } => {
                    if values.len() != boundaries.len() + 1 || boundaries.windows(2).any(|w| w[0] >= w[1]) {
                        return Err(GraphError::invalid(
                            "piecewise_constant",
                            "needs increasing boundaries and one more value than boundaries",
                        ));
                    }
                    let mut lr = b.scalar(values[0])?;
                    for (i, boundary) in boundaries.iter().enumerate() {
                        let bound = b.scalar(*boundary as f32)?;
                        let past = b.greater(step, bound)?;
                        let past = b.cast(past, DType::F32)?;
                        let jump = b.scalar(values[i + 1] - values[i])?;
                        let add = b.mul(past, jump)?;
                        lr = b.add(lr, add)?;
                    }
                    Ok(lr)
                }
                LearningRate::CosineDecay { initial, decay_steps, alpha } => {
                    positive(*decay_steps, "decay_steps")?;
                    let steps = b.scalar(*decay_steps as f32)?;
                    let clamped = b.minimum(step, steps)?;
                    let frac = b.div(clamped, steps)?;
                    let pi = b.scalar(std::f32::consts::PI)?;
                    let angle = b.mul(frac, pi)?;
                    let c = b.cos(angle)?;
                    let one = b.scalar(1.0)?;
                    let c1 = b.add(c, one)?;
                    let scale = b.scalar(0.5 * (1.0 - alpha))?;
                    let decayed = b.mul(c1, scale)?;
                    let a = b.scalar(*alpha)?;
                    let decayed = b.add(decayed, a)?;
                    let init = b.scalar(*initial)?;
                    b.mul(init, decayed)
                }
                LearningRate::LinearWarmup { steps, initial, then } => {
                    positive(*steps, "warmup steps")?;
                    let end = b.scalar(*steps as f32)?;
                    let peak = then.at(b, end)?;
                    let start = b.scalar(*initial)?;
                    let rise = b.sub(peak, start)?;
                    let frac = b.div(step, end)?;
                    let up = b.mul(rise, frac)?;
                    let warm = b.add(start, up)?;
                    let after = then.at(b, step)?;
                    // warm while step < steps, then the schedule: a 0/1 blend.
                    let warming = b.less(step, end)?;
                    let warming = b.cast(warming, DType::F32)?;
                    let one = b.scalar(1.0)?;
                    let done = b.sub(one, warming)?;
                    let a = b.mul(warm, warming)?;
                    let c = b.mul(after, done)?;
                    b.add(a, c)
                }
                LearningRate::ReducedOnPlateau { then, min_lr } => {
                    let base = then.at(b, step)?;
                    let scale = match b.graph().find(LEARNING_RATE_SCALE) {
                        Ok(id) => Outlet::from(id),
                        Err(_) => {
                            let op = Variable {
                                dtype: DType::F32,
                                shape: vec![],
                                init: Initializer::Ones,
                                trainable: false,
                                partition: None,
                            };
                            b.op_named(LEARNING_RATE_SCALE, op.into(), &[])?
                        }
                    };
                    let scaled = b.mul(base, scale)?;
                    let floor = b.scalar(*min_lr)?;
                    let floored = b.maximum(scaled, floor)?;
                    b.minimum(base, floored)
                }
            }
        }
    }
}

fn positive(steps: u64, what: &str) -> Result<()> {
    if steps == 0 { Err(GraphError::invalid(what, "must be positive")) } else { Ok(()) }
}
