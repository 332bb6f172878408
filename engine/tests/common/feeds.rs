//! A fixed batch for a plan's inputs, for tests that run plans directly.

use anyhow::{Result, anyhow};
use engine_graph::{DType, HostTensor, Plan};
use std::collections::BTreeMap;

/// One value for every input of `plan`, in its placeholder's shape at `batch`: floats in
/// [0, 1) from a simple generator started at `seed`, integers (labels) `int(i)` for the
/// input's `i`-th element.
pub fn fixed_feeds(
    plan: &Plan,
    batch: usize,
    seed: u64,
    int: impl Fn(usize) -> i64,
) -> Result<BTreeMap<String, HostTensor>> {
    let mut state = seed;
    let mut out = BTreeMap::new();
    for (name, outlet) in &plan.graph.roles.inputs {
        let fact = plan.graph.fact(*outlet)?;
        let dims = fact.shape.resolve(batch);
        let n = dims.iter().product::<usize>();
        let value = match fact.dtype {
            DType::F32 => HostTensor::f32(
                dims,
                (0..n)
                    .map(|_| {
                        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (state >> 40) as f32 / (1u64 << 24) as f32
                    })
                    .collect(),
            )?,
            DType::I64 => HostTensor::i64(dims, (0..n).map(&int).collect())?,
            other => return Err(anyhow!("input `{name}` is {other}: no feed for it")),
        };
        out.insert(name.clone(), value);
    }
    Ok(out)
}
