//! Sharding per InputContext: partitions for every policy and pipeline count, and the
//! step counts all pipelines agree on with uneven shards (TensorFlow #33086).

mod input_common;

use anyhow::Result;
use engine_estimator::input::{AutoShardPolicy, CsvOptions, Dataset, InputContext, MASK_FEATURE};
use input_common::*;
use std::collections::BTreeSet;

const POLICIES: [AutoShardPolicy; 4] =
    [AutoShardPolicy::Auto, AutoShardPolicy::File, AutoShardPolicy::Data, AutoShardPolicy::Off];

/// Each pipeline's example ids, checking that feature `a` is the id (the right rows were read).
fn shard_ids(ds: &Dataset, num: usize, policy: AutoShardPolicy) -> Result<Vec<Vec<u64>>> {
    (0..num)
        .map(|index| {
            let ctx = InputContext::new(num, index, num)?;
            let batches = collect(&ds.clone().shard_by(&ctx, policy)?.batch(1000))?;
            for b in &batches {
                let a: Vec<u64> = b.features["a"].as_f32().unwrap_or_default().iter().map(|&v| v as u64).collect();
                assert_eq!(a, b.ids);
            }
            Ok(ids(&batches))
        })
        .collect()
}

fn check_partition(shards: &[Vec<u64>], total: u64, what: &str) {
    let mut seen = BTreeSet::new();
    for shard in shards {
        for &id in shard {
            assert!(seen.insert(id), "{what}: example {id} is in two shards");
        }
    }
    assert_eq!(seen, (0..total).collect::<BTreeSet<_>>(), "{what}: the union is not the dataset");
}

#[test]
fn shards_partition_the_dataset_for_every_policy_and_pipeline_count() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let counts = [7, 5, 6];
    let total = counts.iter().sum::<usize>() as u64;
    let ds = Dataset::from_csv(CsvOptions::new(write_csv_parts(dir.path(), &counts)?).label("y"))?;
    for num in 1..=4 {
        for policy in POLICIES {
            let what = format!("{num} pipelines, {policy:?}");
            let result = shard_ids(&ds, num, policy);
            match (policy, num) {
                (AutoShardPolicy::File, 4) => {
                    let err = result.err().map(|e| e.to_string()).unwrap_or_default();
                    assert!(err.contains("at least as many input files as input pipelines"), "{what}: {err}");
                    assert!(err.contains("3 file(s) for 4 pipelines"), "{what}: {err}");
                }
                (AutoShardPolicy::Off, _) => {
                    for shard in result? {
                        assert_eq!(shard, (0..total).collect::<Vec<_>>(), "{what}: every pipeline sees everything");
                    }
                }
                _ => check_partition(&result?, total, &what),
            }
        }
    }
    // Auto is File when there are enough files, Data otherwise.
    assert_eq!(shard_ids(&ds, 3, AutoShardPolicy::Auto)?, shard_ids(&ds, 3, AutoShardPolicy::File)?);
    assert_eq!(shard_ids(&ds, 2, AutoShardPolicy::File)?[1], (7..12).collect::<Vec<_>>());
    assert_eq!(shard_ids(&ds, 4, AutoShardPolicy::Auto)?, shard_ids(&ds, 4, AutoShardPolicy::Data)?);
    assert_eq!(shard_ids(&ds, 4, AutoShardPolicy::Data)?[3], vec![3, 7, 11, 15]);
    Ok(())
}

#[test]
fn in_memory_data_shards_by_data_and_refuses_file_sharding() -> Result<()> {
    for num in 1..=4 {
        let shards: Vec<Vec<u64>> = (0..num)
            .map(|i| -> Result<Vec<u64>> {
                let ctx = InputContext::new(num, i, num)?;
                Ok(ids(&collect(&tensors(23)?.shard_by(&ctx, AutoShardPolicy::Auto)?.batch(100))?))
            })
            .collect::<Result<_>>()?;
        check_partition(&shards, 23, &format!("tensors, {num} pipelines"));
    }
    let ctx = InputContext::new(2, 0, 2)?;
    let err = tensors(4)?.shard_by(&ctx, AutoShardPolicy::File)?.iter().err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("0 file(s) for 2 pipelines")));
    // The explicit form.
    assert_eq!(ids(&collect(&tensors(10)?.shard(3, 2).batch(10))?), [2, 5, 8]);
    Ok(())
}

#[test]
fn training_pipelines_agree_on_steps_per_epoch_with_uneven_shards() -> Result<()> {
    // 103 examples over 4 pipelines: shards of 26, 26, 26 and 25; batches of 8 give
    // 3 steps (the smallest shard's full batches) on every pipeline.
    let mut per_pipeline = Vec::new();
    for index in 0..4 {
        let ctx = InputContext::new(4, index, 4)?;
        let ds = tensors(103)?.shard_by(&ctx, AutoShardPolicy::Data)?.shuffle(50, 1);
        assert_eq!(ds.shard_sizes()?, [26, 26, 26, 25]);
        assert_eq!(ds.steps_per_epoch(8)?, 3);
        let batches = collect(&ds.batch_for_training(8)?.repeat(Some(2)))?;
        assert!(batches.iter().all(|b| b.len == 8));
        per_pipeline.push(batches.len());
        // Each epoch's batches are distinct examples of this shard.
        let epoch: Vec<u64> = ids(&batches[..3]);
        assert_eq!(epoch.iter().collect::<BTreeSet<_>>().len(), 24);
        assert!(epoch.iter().all(|&id| id % 4 == index as u64));
    }
    assert_eq!(per_pipeline, [6, 6, 6, 6]);

    // Two replicas per pipeline: steps are whole steps of two batches each.
    let ctx = InputContext::new(2, 1, 4)?;
    let ds = tensors(103)?.shard_by(&ctx, AutoShardPolicy::Data)?;
    assert_eq!(ds.steps_per_epoch(8)?, 3); // min(52, 51) / 8 = 6 batches = 3 steps of 2
    assert_eq!(collect(&ds.batch_for_training(8)?)?.len(), 6);

    // A shard smaller than one batch is an error that says which.
    let ctx = InputContext::new(4, 0, 4)?;
    let err = tensors(10)?.shard_by(&ctx, AutoShardPolicy::Data)?.steps_per_epoch(4).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("shard 2 of 4 has 2 examples")));
    Ok(())
}

#[test]
fn evaluation_pads_so_every_example_counts_exactly_once() -> Result<()> {
    let mut all = Vec::new();
    let mut mask_total = 0.0;
    for index in 0..4 {
        let ctx = InputContext::new(4, index, 4)?;
        let ds = tensors(103)?.shard_by(&ctx, AutoShardPolicy::Data)?;
        assert_eq!(ds.eval_steps(8)?, 4); // ceil(26 / 8)
        let batches = collect(&ds.batch_for_evaluation(8)?)?;
        assert_eq!(batches.len(), 4, "pipeline {index}");
        for b in &batches {
            assert_eq!(b.len, 8);
            let mask = b.features[MASK_FEATURE].as_f32().unwrap_or_default();
            assert_eq!(mask.iter().filter(|&&m| m == 1.0).count(), b.ids.len());
            mask_total += mask.iter().sum::<f32>();
        }
        all.extend(ids(&batches));
    }
    check_partition(&[all], 103, "evaluation");
    assert_eq!(mask_total, 103.0);
    Ok(())
}

/// An elastic job's input: every worker reads the one pipeline re-batched to its share of
/// the global batch and takes batch `rank` of every `workers`; started after `step` global
/// batches, the shares of each step are that step's global batch, in order, whatever the
/// number of workers, with shuffling and repetition on.
#[test]
fn shares_of_a_rebatched_pipeline_make_up_the_global_batches() -> Result<()> {
    const GLOBAL: usize = 12;
    let pipeline = || tensors(100).map(|ds| ds.shuffle(30, 7).repeat(None));
    let whole: Vec<Vec<u64>> =
        pipeline()?.batch(GLOBAL).iter_after(5)?.take(20).map(|b| Ok(b?.ids)).collect::<Result<_>>()?;
    for workers in [1, 2, 3, 4] {
        let shares: Vec<Vec<Vec<u64>>> = (0..workers)
            .map(|rank| {
                let ds = pipeline()?.batch(GLOBAL).rebatch(GLOBAL / workers)?;
                ds.iter_after(5 * workers as u64)?.strided(workers, rank).take(20).map(|b| Ok(b?.ids)).collect()
            })
            .collect::<Result<_>>()?;
        for (step, want) in whole.iter().enumerate() {
            let got: Vec<u64> = shares.iter().flat_map(|s| s[step].clone()).collect();
            assert_eq!(&got, want, "{workers} workers, step {step}");
        }
    }
    let padded = tensors(10)?.padded_batch(4, 3).rebatch(2).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(padded.contains("a padded batch cannot be re-batched"), "{padded}");
    assert!(tensors(10)?.rebatch(2).is_err(), "an unbatched dataset");
    Ok(())
}
