//! Variable initializers, with Keras' formulas and deterministic seeding.
//!
//! Initial values are drawn on the host from a ChaCha stream seeded by the job's random
//! seed and the variable's name, so they are identical across backends, processes and
//! strategies: a mirrored replica, a worker and a single-device run start from the same
//! weights without broadcasting them, and equivalence tests compare like with like.

use crate::{DType, GraphError, HostData, HostTensor, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub enum Initializer {
    #[default]
    Zeros,
    Ones,
    Constant(f32),
    /// `U(-l, l)` with `l = sqrt(6 / (fan_in + fan_out))` (Keras' default for kernels).
    GlorotUniform,
    /// `N(0, sqrt(2 / (fan_in + fan_out)))` truncated at two standard deviations.
    GlorotNormal,
    /// Truncated normal with standard deviation `sqrt(2 / fan_in)` (Keras' `he_normal`).
    HeNormal,
    /// `U(-l, l)` with `l = sqrt(6 / fan_in)`.
    HeUniform,
    RandomNormal {
        mean: f32,
        stddev: f32,
    },
    RandomUniform {
        min: f32,
        max: f32,
    },
    TruncatedNormal {
        mean: f32,
        stddev: f32,
    },
}

/// Keras scales a truncated normal's standard deviation by this so that the truncated
/// distribution has the intended variance.
const TRUNCATED_STDDEV_CORRECTION: f32 = 0.879_625_7;

impl Initializer {
    /// Draws the initial value of a variable of `shape`.
    pub fn sample(&self, dtype: DType, shape: &[usize], seed: u64) -> Result<HostTensor> {
        let n: usize = shape.iter().product();
        if dtype != DType::F32 {
            let value = match self {
                Initializer::Zeros => 0,
                Initializer::Ones => 1,
                Initializer::Constant(c) if c.fract() == 0.0 => *c as i64,
                other => {
                    return Err(GraphError::invalid(
                        "initializer",
                        format!("{other:?} cannot initialize a {dtype} variable"),
                    ));
                }
            };
            let data = match dtype {
                DType::I64 => HostData::I64(vec![value; n]),
                _ => HostData::Bool(vec![value != 0; n]),
            };
            return HostTensor::new(shape.to_vec(), data);
        }
        let (fan_in, fan_out) = fans(shape);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data: Vec<f32> = match *self {
            Initializer::Zeros => vec![0.0; n],
            Initializer::Ones => vec![1.0; n],
            Initializer::Constant(c) => vec![c; n],
            Initializer::GlorotUniform => uniform(&mut rng, n, (6.0 / (fan_in + fan_out)).sqrt()),
            Initializer::HeUniform => uniform(&mut rng, n, (6.0 / fan_in).sqrt()),
            Initializer::GlorotNormal => {
                truncated(&mut rng, n, 0.0, (2.0 / (fan_in + fan_out)).sqrt() / TRUNCATED_STDDEV_CORRECTION)
            }
            Initializer::HeNormal => truncated(&mut rng, n, 0.0, (2.0 / fan_in).sqrt() / TRUNCATED_STDDEV_CORRECTION),
            Initializer::RandomNormal { mean, stddev } => (0..n).map(|_| mean + stddev * normal(&mut rng)).collect(),
            Initializer::RandomUniform { min, max } => {
                (0..n).map(|_| min + (max - min) * rng.random::<f32>()).collect()
            }
            Initializer::TruncatedNormal { mean, stddev } => truncated(&mut rng, n, mean, stddev),
        };
        HostTensor::f32(shape.to_vec(), data)
    }
}

/// Keras' fan computation: the last two dimensions are (in, out), the rest a receptive field.
fn fans(shape: &[usize]) -> (f32, f32) {
    match shape.len() {
        0 => (1.0, 1.0),
        1 => (shape[0] as f32, shape[0] as f32),
        r => {
            let receptive: usize = shape[..r - 2].iter().product();
            ((shape[r - 2] * receptive) as f32, (shape[r - 1] * receptive) as f32)
        }
    }
}

fn uniform(rng: &mut ChaCha8Rng, n: usize, limit: f32) -> Vec<f32> {
    (0..n).map(|_| limit * (2.0 * rng.random::<f32>() - 1.0)).collect()
}

/// A standard normal sample (Box–Muller).
fn normal(rng: &mut ChaCha8Rng) -> f32 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// Normal samples redrawn until within two standard deviations, as TensorFlow does.
fn truncated(rng: &mut ChaCha8Rng, n: usize, mean: f32, stddev: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            loop {
                let z = normal(rng);
                if z.abs() <= 2.0 {
                    break mean + stddev * z;
                }
            }
        })
        .collect()
}

/// A stable 64-bit seed for a named stream: FNV-1a over the name, mixed with the job seed.
/// Stable across Rust versions and platforms, unlike `DefaultHasher`.
pub fn derive_seed(job_seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ job_seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for byte in name.bytes() {
        h ^= byte as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glorot_uniform_respects_its_limit_and_is_deterministic() -> Result<()> {
        let a = Initializer::GlorotUniform.sample(DType::F32, &[3, 3, 1, 32], 7)?;
        let b = Initializer::GlorotUniform.sample(DType::F32, &[3, 3, 1, 32], 7)?;
        assert_eq!(a, b);
        let limit = (6.0f32 / (9.0 + 288.0)).sqrt();
        let v = a.as_f32().unwrap_or_default();
        assert!(v.iter().all(|x| x.abs() <= limit));
        assert!(v.iter().any(|x| x.abs() > limit * 0.5));
        Ok(())
    }

    #[test]
    fn random_normal_has_the_requested_moments() -> Result<()> {
        let t = Initializer::RandomNormal { mean: 1.0, stddev: 2.0 }.sample(DType::F32, &[20000], 3)?;
        let v = t.as_f32().unwrap_or_default();
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / v.len() as f32;
        assert!((mean - 1.0).abs() < 0.05, "{mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.05, "{var}");
        Ok(())
    }

    #[test]
    fn truncated_normal_stays_within_two_stddevs() -> Result<()> {
        let t = Initializer::TruncatedNormal { mean: 0.0, stddev: 0.1 }.sample(DType::F32, &[5000], 3)?;
        assert!(t.as_f32().unwrap_or_default().iter().all(|x| x.abs() <= 0.2 + 1e-6));
        Ok(())
    }

    #[test]
    fn seeds_differ_by_name_and_job_seed() {
        assert_ne!(derive_seed(1, "dense/kernel"), derive_seed(1, "dense_1/kernel"));
        assert_ne!(derive_seed(1, "dense/kernel"), derive_seed(2, "dense/kernel"));
        assert_eq!(derive_seed(5, "w"), derive_seed(5, "w"));
    }
}
