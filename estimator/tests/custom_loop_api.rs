//! The custom-loop API (`engine_estimator::distribute`) in one process: the loop under
//! `mirrored` takes the steps `default` takes on the same global batches, `reduce` and
//! `metrics` give the global batch's values, a checkpoint restores the variables, the
//! loop's counters and the input position, tasks other than the chief write nothing, and
//! a NaN in a batch is an error that leaves the variables as they were.
//! Multi-process runs of the same API: tests/custom_loop.rs at the workspace root.

mod estimator_common;

use anyhow::{Result, ensure};
use engine_estimator::strategy::StrategyOptions;
use engine_estimator::{
    EstimatorError, Params, RunConfig,
    distribute::{DistributedDataset, DistributionStrategy, LoopCheckpointManager, LoopSummaries, ReduceOp, Step},
    input::Dataset,
};
use engine_graph::HostTensor;
use engine_runtime::{DeviceName, Precision};
use estimator_common::{dataset, linear_model};
use std::collections::BTreeMap;

const GLOBAL_BATCH: usize = 4;

fn strategy(name: &str) -> Result<DistributionStrategy> {
    let config = RunConfig {
        random_seed: Some(7),
        precision: Precision::F64,
        strategy: StrategyOptions {
            devices: Some(vec![DeviceName::cpu(0), DeviceName::cpu(1)]),
            ..StrategyOptions::default()
        },
        ..RunConfig::new("")
    };
    Ok(DistributionStrategy::with_config(name.parse()?, &config)?)
}

fn distributed(strategy: &DistributionStrategy) -> Result<DistributedDataset> {
    let global = GLOBAL_BATCH;
    Ok(strategy.distribute_datasets_from_function(|ctx| {
        // 8 of the 10 examples: every global batch then holds the same examples under both.
        Ok(dataset()?.take(8).batch_drop_remainder(ctx.per_replica_batch_size(global)?).repeat(None))
    })?)
}

fn compile(strategy: &DistributionStrategy, data: &DistributedDataset) -> Result<Step> {
    let params = serde_json::json!({ "learning_rate": 0.1 });
    Ok(strategy.compile_step(&linear_model, &params, data)?)
}

fn max_difference(a: &BTreeMap<String, HostTensor>, b: &BTreeMap<String, HostTensor>) -> f64 {
    a.iter()
        .map(|(name, t)| {
            let other = b.get(name).map(|o| o.to_f64_vec()).unwrap_or_default();
            let x = t.to_f64_vec();
            if x.len() != other.len() {
                return f64::INFINITY;
            }
            x.iter().zip(&other).fold(0.0f64, |m, (p, q)| m.max((p - q).abs()))
        })
        .fold(0.0, f64::max)
}

/// Runs `steps` steps; the reduced (Sum) loss of each.
fn train(
    strategy: &DistributionStrategy,
    step: &mut Step,
    data: &DistributedDataset,
    steps: usize,
) -> Result<Vec<f64>> {
    let mut iterator = data.iter()?;
    let mut losses = Vec::new();
    for _ in 0..steps {
        let out = strategy.run(step, iterator.expect_batch()?)?;
        ensure!(out.len() == strategy.local_replicas(), "{} outputs", out.len());
        losses.push(strategy.reduce(ReduceOp::Sum, &out.losses())?);
    }
    Ok(losses)
}

#[test]
fn mirrored_takes_the_steps_default_takes_on_the_same_global_batches() -> Result<()> {
    let one = strategy("default")?;
    let data_one = distributed(&one)?;
    let mut reference = compile(&one, &data_one)?;
    let want = train(&one, &mut reference, &data_one, 5)?;

    let two = strategy("mirrored")?;
    ensure!(two.num_replicas_in_sync() == 2 && two.local_replicas() == 2);
    let data = distributed(&two)?;
    ensure!(data.per_replica_batch_size() == Some(GLOBAL_BATCH / 2));
    let mut step = compile(&two, &data)?.fetch(&["predictions/prediction"])?;
    ensure!(compile(&two, &data)?.fetch(&["no/such/node"]).is_err(), "an unknown fetch was accepted");
    // The plan is the strategy's: the gradients are all-reduced between the replicas.
    ensure!(step.plan().graph.nodes().any(|(_, n)| n.op.is_collective()), "no all-reduce in the mirrored step");
    let got = train(&two, &mut step, &data, 5)?;
    let out = two.run(&mut step, data.iter()?.expect_batch()?)?;
    let shapes: Vec<Vec<usize>> =
        out.values().iter().map(|o| o.fetched["predictions/prediction"].shape.clone()).collect();
    ensure!(shapes == vec![vec![2, 1], vec![2, 1]], "per-replica predictions {shapes:?}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        ensure!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "step {i}: loss {g} under mirrored, {w} under default");
    }
    // One more step on a fresh pass's first global batch, as the mirrored run just took.
    train(&one, &mut reference, &data_one, 1)?;
    ensure!(step.global_step() == 6 && reference.global_step() == 6);
    let d = max_difference(&step.variables()?, &reference.variables()?);
    ensure!(d <= 1e-9, "variables differ by {d}");
    // Metrics cover every example of every step, on every replica.
    let (m, r) = (two.metrics(&step)?, one.metrics(&reference)?);
    ensure!(m.keys().eq(r.keys()) && m.len() == 2, "{m:?} vs {r:?}");
    for (name, value) in &m {
        // Increments come back from the graph as f32.
        ensure!((value - r[name]).abs() <= 1e-6 * r[name].abs().max(1.0), "{name}: {value} vs {}", r[name]);
    }
    step.reset_metrics();
    ensure!(two.metrics(&step)?.values().all(|v| *v == 0.0), "reset_metrics keeps state");
    // Mean is the sum over the replicas divided by their number.
    let sum = two.reduce(ReduceOp::Sum, &engine_estimator::distribute::PerReplica(vec![1.0, 3.0]))?;
    let mean = two.reduce(ReduceOp::Mean, &engine_estimator::distribute::PerReplica(vec![1.0, 3.0]))?;
    ensure!(sum == 4.0 && mean == 2.0, "sum {sum}, mean {mean}");
    Ok(())
}

#[test]
fn a_checkpoint_restores_variables_counters_and_the_input_position() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let location = dir.path().to_string_lossy().into_owned();
    let s = strategy("default")?;
    let data = distributed(&s)?;
    let mut step = compile(&s, &data)?;
    let checkpoints = s.checkpoint_manager(&location, 1)?;
    ensure!(checkpoints.restore_or_initialize(&mut step)?.is_none(), "an empty directory restored something");
    let mut iterator = data.iter()?;
    for _ in 0..3 {
        s.run(&mut step, iterator.expect_batch()?)?;
    }
    let info = checkpoints.save(&step, &[("epoch", 2), ("step_in_epoch", 1)], Some(&iterator))?;
    ensure!(info.as_ref().map(|i| i.step) == Some(3), "{info:?}");
    ensure!(checkpoints.latest_checkpoint()?.as_deref() == Some("model.ckpt-3"));
    let saved = step.variables()?;
    // The unbroken run: two more steps, and the examples they read.
    let mut unbroken_ids = Vec::new();
    for _ in 0..2 {
        let batch = iterator.expect_batch()?;
        unbroken_ids.push(batch.values()[0].ids.clone());
        s.run(&mut step, batch)?;
    }

    let mut resumed = compile(&s, &data)?;
    let state = checkpoints.restore_or_initialize(&mut resumed)?.ok_or_else(|| anyhow::anyhow!("nothing restored"))?;
    ensure!(state.global_step == 3 && resumed.global_step() == 3, "{state:?}");
    ensure!(state.counter("epoch") == Some(2) && state.counter("step_in_epoch") == Some(1), "{state:?}");
    ensure!(max_difference(&resumed.variables()?, &saved) == 0.0, "restored variables differ");
    let mut iterator = data.iter_resumed(&state)?;
    let mut resumed_ids = Vec::new();
    for _ in 0..2 {
        let batch = iterator.expect_batch()?;
        resumed_ids.push(batch.values()[0].ids.clone());
        s.run(&mut resumed, batch)?;
    }
    ensure!(resumed_ids == unbroken_ids, "resumed input {resumed_ids:?}, unbroken {unbroken_ids:?}");
    // Checkpoints hold f32, so the f64 run resumes from values rounded to f32.
    let (a, b) = (resumed.variables()?, step.variables()?);
    ensure!(max_difference(&a, &b) <= 1e-6, "the resumed run ended elsewhere: {a:?} vs {b:?}");
    Ok(())
}

#[test]
fn tasks_other_than_the_chief_write_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let location = dir.path().join("ckpt").to_string_lossy().into_owned();
    let s = strategy("default")?;
    let data = distributed(&s)?;
    let mut step = compile(&s, &data)?;
    s.run(&mut step, data.iter()?.expect_batch()?)?;
    let manager = LoopCheckpointManager::new(&location, 1, false)?;
    ensure!(manager.save(&step, &[("epoch", 1)], None)?.is_none(), "a non-chief saved");
    let mut summaries = LoopSummaries::new(&location, false)?;
    summaries.scalar("loss", 1, 0.5)?;
    summaries.flush()?;
    ensure!(summaries.url().is_none());
    let written: Vec<_> = std::fs::read_dir(dir.path().join("ckpt"))?.collect();
    ensure!(written.is_empty(), "a non-chief wrote {written:?}");
    Ok(())
}

#[test]
fn a_nan_in_a_batch_is_an_error_and_no_variable_changes() -> Result<()> {
    let s = strategy("default")?;
    let x = HostTensor::f32(vec![4, 2], vec![0.1, 0.2, f32::NAN, 0.4, 0.5, 0.6, 0.7, 0.8])?;
    let v = HostTensor::f32(vec![4], vec![0.0, 1.0, 2.0, 3.0])?;
    let y = HostTensor::f32(vec![4, 1], vec![1.0, 2.0, 3.0, 4.0])?;
    let data = s.distribute_datasets_from_function(|_| {
        Ok(Dataset::from_tensors(BTreeMap::from([("x".into(), x), ("v".into(), v)]), Some(y))?.batch(4))
    })?;
    let mut step = s.compile_step(&linear_model, &Params::Null, &data)?;
    let before = step.variables()?;
    let error = s.run(&mut step, data.iter()?.expect_batch()?).err();
    ensure!(matches!(error, Some(EstimatorError::NonFinite { step: 0, .. })), "{error:?}");
    ensure!(
        max_difference(&step.variables()?, &before) == 0.0 && step.global_step() == 0,
        "the NaN step changed the variables"
    );
    // A batch for two replicas is refused by a one-replica strategy.
    let two = strategy("mirrored")?;
    let data = distributed(&two)?;
    let batch = data.iter()?.expect_batch()?;
    let error = s.run(&mut step, batch).err().map(|e| e.to_string()).unwrap_or_default();
    ensure!(error.contains("2 batches for 1 local replicas"), "{error}");
    Ok(())
}
