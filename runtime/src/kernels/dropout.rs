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

/// The mask over `n` units: `scale` (`1 / keep`) where a unit is kept, else zero, written
/// by `put(unit, kept)`; returns `scale`. Every kernel (generic, native) draws through
/// this, so their masks are the same bits.
pub(super) fn draw(d: &Dropout, n: usize, ctx: &KernelCtx<'_>, mut put: impl FnMut(usize, bool)) -> f64 {
    let keep = 1.0 - d.rate as f64;
    let stream = format!("dropout/{}", ctx.step);
    let mut rng = ChaCha8Rng::seed_from_u64(derive_seed(d.seed, &stream));
    // Each draw below takes two 32-bit words.
    rng.set_word_pos(2 * ctx.replica as u128 * n as u128);
    for unit in 0..n {
        put(unit, rng.random::<f64>() < keep);
    }
    1.0 / keep
}

pub(super) fn run(d: &Dropout, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    let [x] = ctx.floats(inputs)?;
    let shape = dims(&x);
    let n: usize = shape.iter().product();
    let mut kept = vec![false; n];
    let scale = draw(d, n, ctx, |i, k| kept[i] = k);
    let data = match ctx.precision {
        Precision::F32 => {
            let mask: Vec<f32> = kept.iter().map(|&k| if k { scale as f32 } else { 0.0 }).collect();
            TensorData::new(mask, BurnShape::from(shape))
        }
        Precision::F64 => {
            TensorData::new(kept.iter().map(|&k| if k { scale } else { 0.0 }).collect::<Vec<f64>>(), BurnShape::from(shape))
        }
    };
    let mask = B::float_from_data(data, ctx.device);
    Ok(vec![Value::Float(B::float_mul(x, mask.clone())), Value::Float(mask)])
}
