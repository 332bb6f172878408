//! Dropout with masks drawn on the host from (seed, global step): reproducible across
//! restarts and identical on every backend. The stream is counter-based: replica `r`
//! starts at its rows' offset in the global batch, so a unit of an example is dropped or
//! kept the same whether the global batch runs on one device or is split over replicas
//! (every replica's batch has the same size in training).

use super::{KernelCtx, dims};
use crate::{Precision, Result, Value, value::B};
use burn::backend::ops::FloatTensorOps;
use burn::tensor::{Shape as BurnShape, TensorData};
use engine_graph::{derive_seed, ops::Dropout};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The mask over `n` units: `1 / keep` (rounded once to `E`) where a unit is kept, else
/// zero. Every kernel (generic, native) draws through this, so their masks are the same
/// bits.
pub(super) fn mask<E: num_traits::Float>(d: &Dropout, n: usize, ctx: &KernelCtx<'_>) -> Result<Vec<E>> {
    let keep = 1.0 - d.rate as f64;
    let scale = E::from(1.0 / keep).ok_or_else(|| ctx.err("dropout scale out of range"))?;
    let stream = format!("dropout/{}", ctx.step);
    let mut rng = ChaCha8Rng::seed_from_u64(derive_seed(d.seed, &stream));
    // Each draw below takes two 32-bit words.
    rng.set_word_pos(2 * ctx.replica as u128 * n as u128);
    Ok((0..n).map(|_| if rng.random::<f64>() < keep { scale } else { E::zero() }).collect())
}

pub(super) fn run(d: &Dropout, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [x] = ctx.floats(inputs)?;
    let shape = dims(&x);
    let n: usize = shape.iter().product();
    let data = match ctx.precision {
        Precision::F32 => TensorData::new(mask::<f32>(d, n, ctx)?, BurnShape::from(shape)),
        Precision::F64 => TensorData::new(mask::<f64>(d, n, ctx)?, BurnShape::from(shape)),
    };
    let mask = B::float_from_data(data, ctx.device);
    Ok(vec![Value::Float(B::float_mul(x, mask.clone())), Value::Float(mask)])
}
