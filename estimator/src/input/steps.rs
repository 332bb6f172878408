//! The step counts every input pipeline agrees on without talking to the others.
//!
//! Shards of uneven size would let one worker run out of data while the others wait for it
//! in a collective forever (TensorFlow issue #33086). Sharding is a pure function of the
//! source indices, so each pipeline computes the size `n_k` of every shard `k` and applies
//! the same rule (`B` the per-replica batch, `R` the replicas each pipeline feeds):
//!
//! - training: `steps = min_k floor(n_k / B) / R` (integer division); each pipeline yields
//!   `steps * R` full batches per epoch and drops the rest of its shard for that epoch (a
//!   different rest each epoch, since the shuffle order changes);
//! - evaluation: `steps = ceil(max_k ceil(n_k / B) / R)`; each pipeline yields `steps * R`
//!   batches of `B` rows, the rows past its shard's end being zeros with `mask` = 0, so every
//!   example is evaluated exactly once and padding weighs nothing.

use super::error::{InputError, Result};

pub(crate) fn train_steps_per_epoch(
    shard_sizes: &[u64],
    batch_size: usize,
    replicas_per_pipeline: usize,
) -> Result<u64> {
    check(batch_size, replicas_per_pipeline)?;
    let (smallest_shard, smallest) = shard_sizes
        .iter()
        .enumerate()
        .min_by_key(|&(_, &n)| n)
        .map(|(k, &n)| (k, n))
        .ok_or_else(|| InputError::Sharding("no shards".into()))?;
    let steps = smallest / batch_size as u64 / replicas_per_pipeline as u64;
    if steps == 0 {
        return Err(InputError::Sharding(format!(
            "shard {smallest_shard} of {} has {smallest} examples, fewer than one step of {replicas_per_pipeline} \
             batch(es) of {batch_size}: use fewer input pipelines or a smaller batch",
            shard_sizes.len()
        )));
    }
    Ok(steps)
}

pub(crate) fn eval_steps(shard_sizes: &[u64], batch_size: usize, replicas_per_pipeline: usize) -> Result<u64> {
    check(batch_size, replicas_per_pipeline)?;
    let batches = shard_sizes.iter().map(|&n| n.div_ceil(batch_size as u64)).max().unwrap_or(0);
    Ok(batches.div_ceil(replicas_per_pipeline as u64))
}

fn check(batch_size: usize, replicas_per_pipeline: usize) -> Result<()> {
    if batch_size == 0 || replicas_per_pipeline == 0 {
        return Err(InputError::invalid("batch size and replicas per pipeline must be at least 1"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_takes_the_smallest_shard() {
        assert_eq!(train_steps_per_epoch(&[34, 33, 33], 8, 1).unwrap(), 4);
        assert_eq!(train_steps_per_epoch(&[34, 33, 33], 8, 2).unwrap(), 2);
        let err = train_steps_per_epoch(&[10, 3], 4, 1).unwrap_err().to_string();
        assert!(err.contains("shard 1 of 2 has 3 examples"), "{err}");
    }

    #[test]
    fn evaluation_takes_the_largest_shard() {
        assert_eq!(eval_steps(&[34, 33, 33], 8, 1).unwrap(), 5);
        assert_eq!(eval_steps(&[34, 33, 33], 8, 2).unwrap(), 3);
        assert_eq!(eval_steps(&[0, 0], 8, 1).unwrap(), 0);
    }
}
