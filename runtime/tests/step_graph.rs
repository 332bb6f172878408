//! A steady-state step on a device is recorded once and replayed as one captured graph
//! (`executor/replay.rs`): on each device of `ENGINE_TEST_DEVICES` (`wgpu:0`, lavapipe),
//! a replayed run computes what an eager run of the same steps computes, reads the device
//! back once per step, refreshes its feeds every step, commits nothing on a step that saw a
//! NaN (and names the culprit), and goes back to watching when the store's variables are
//! replaced under it (a restore).

use anyhow::{Context, Result, anyhow, ensure};
use engine_graph::{
    DType, Graph, GraphBuilder, HostTensor, Initializer, Outlet, Plan, Shape,
    autodiff::Autodiff,
    optimizer::{ApplyOptimizer, LearningRate, Optimizer, OptimizerConfig},
    passes::{CheckNumericsPass, Pass},
};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore, device_reads};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A small classifier trained by Adam: `softmax(relu(x · w1 + b1) · w2)` against integer
/// labels, with the numerics checks, so a step has feeds of two types, several variables
/// with optimizer slots, an integer counter and a loss to fetch.
fn training_plan() -> Result<(Plan, Outlet, Outlet)> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[4]))?;
    let labels = b.placeholder("labels", DType::I64, Shape::batched(&[]))?;
    let w1 = b.variable("w1", &[4, 8], Initializer::GlorotUniform, true)?;
    let b1 = b.variable("b1", &[8], Initializer::Zeros, true)?;
    let w2 = b.variable("w2", &[8, 3], Initializer::GlorotUniform, true)?;
    let h = b.matmul(x, w1)?;
    let h = b.add(h, b1)?;
    let h = b.relu(h)?;
    let logits = b.matmul(h, w2)?;
    let loss = b.sparse_softmax_cross_entropy(logits, labels)?;
    let loss = b.reduce_mean(loss, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("x".into(), x);
    g.roles.inputs.insert("labels".into(), labels);
    Autodiff.run(&mut g)?;
    let config = OptimizerConfig {
        optimizer: Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 },
        learning_rate: LearningRate::Constant(0.05),
        clip_global_norm: None,
    };
    ApplyOptimizer { config }.run(&mut g)?;
    CheckNumericsPass.run(&mut g)?;
    let train_op = g.roles.train_op.ok_or_else(|| anyhow!("no train op"))?;
    Ok((Plan::new(g, vec![])?, loss, train_op))
}

/// Step `step`'s batch of 6: different values every step, so a replay that kept reading
/// the recorded step's feeds would show.
fn feeds(step: usize, nan: bool) -> Result<BTreeMap<String, HostTensor>> {
    let mut x: Vec<f32> = (0..24).map(|i| (((i * 7 + step * 13) % 17) as f32 - 8.0) / 5.0).collect();
    if nan {
        x[5] = f32::NAN;
    }
    let labels = (0..6).map(|i| ((i + step) % 3) as i64).collect();
    Ok(BTreeMap::from([
        ("x".to_string(), HostTensor::f32(vec![6, 4], x)?),
        ("labels".to_string(), HostTensor::new(vec![6], engine_graph::HostData::I64(labels))?),
    ]))
}

/// The tests of this binary run one at a time: the device read counter is process-wide.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn devices() -> Result<Vec<Device>> {
    std::env::var("ENGINE_TEST_DEVICES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|name| Ok(Device::open(name.trim().parse()?)?))
        .collect()
}

/// Each step's loss, and the variables after the last one. `nan_at`: the step whose input
/// holds a NaN. `restore_at`: the step before which the variables are exported and
/// restored, as a checkpoint restore replaces them.
struct Run {
    losses: Vec<Option<f32>>,
    vars: BTreeMap<String, HostTensor>,
    replayed: u64,
    reads: Vec<u64>,
    culprits: Vec<(usize, String)>,
    refused: Option<String>,
}

fn train(device: &Device, graph: bool, steps: usize, nan_at: Option<usize>, restore_at: Option<usize>) -> Result<Run> {
    let (plan, loss, train_op) = training_plan()?;
    let exec = Executor::new(Arc::new(plan), device.clone(), Precision::F32)?.with_step_graph(graph);
    let mut vars = VariableStore::new();
    exec.initialize(&mut vars, 7)?;
    let mut run = Run {
        losses: Vec::new(),
        vars: BTreeMap::new(),
        replayed: 0,
        reads: Vec::new(),
        culprits: Vec::new(),
        refused: None,
    };
    for step in 0..steps {
        if restore_at == Some(step) {
            let saved = vars.export()?;
            for (name, value) in &saved {
                vars.set(name, engine_runtime::Value::from_host(value, device.dispatch(), Precision::F32));
            }
        }
        let before = device_reads();
        let out = exec.run(&mut vars, &feeds(step, nan_at == Some(step))?, &[loss, train_op], RunOptions::default())?;
        run.reads.push(device_reads() - before);
        run.losses.push(out.fetched[0].to_host()?.as_f32().and_then(|v| v.first().copied()));
        run.culprits.extend(out.non_finite.iter().map(|n| (step, n.message.clone())));
    }
    run.vars = vars.export()?;
    run.replayed = exec.replayed_steps();
    run.refused = exec.step_graph_refused();
    Ok(run)
}

fn close(a: &HostTensor, b: &HostTensor) -> bool {
    let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
    a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + y.abs()))
}

fn same(replayed: &Run, eager: &Run, what: &str) -> Result<()> {
    for (step, (r, e)) in replayed.losses.iter().zip(&eager.losses).enumerate() {
        let (r, e) = (r.context("no loss")?, e.context("no loss")?);
        ensure!(
            (r - e).abs() <= 1e-5 * (1.0 + e.abs()) || (r.is_nan() && e.is_nan()),
            "{what}: step {step}'s loss {r} replayed, {e} eager"
        );
    }
    ensure!(replayed.vars.keys().eq(eager.vars.keys()), "{what}: other variables");
    for (name, value) in &replayed.vars {
        ensure!(close(value, &eager.vars[name]), "{what}: {name} differs after the last step");
    }
    ensure!(
        replayed.culprits == eager.culprits,
        "{what}: {:?} replayed, {:?} eager",
        replayed.culprits,
        eager.culprits
    );
    Ok(())
}

#[test]
fn a_replayed_step_computes_what_the_eager_step_computes() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for device in devices()? {
        let replayed = train(&device, true, 12, None, None)?;
        let eager = train(&device, false, 12, None, None)?;
        same(&replayed, &eager, &format!("{device}"))?;
        // Two steps watched, one warmup, then every step is a replay (the first of them
        // the recorded one).
        ensure!(
            replayed.replayed == 9,
            "{device}: {} steps replayed of 12 ({:?})",
            replayed.replayed,
            replayed.refused
        );
        ensure!(eager.replayed == 0);
        ensure!(replayed.reads[3..].iter().all(|&r| r <= 1), "{device}: device reads per step {:?}", replayed.reads);
    }
    Ok(())
}

#[test]
fn a_nan_in_a_replayed_step_commits_nothing_and_names_the_culprit() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for device in devices()? {
        let replayed = train(&device, true, 10, Some(6), None)?;
        let eager = train(&device, false, 10, Some(6), None)?;
        same(&replayed, &eager, &format!("{device}, a NaN at step 6"))?;
        ensure!(
            replayed.culprits.first().is_some_and(|(step, what)| *step == 6 && what == "gradient of w1"),
            "{device}: {:?}",
            replayed.culprits
        );
        // The step after the NaN still replays (the graph is kept, and nothing committed).
        ensure!(replayed.replayed == 7, "{device}: {} steps replayed of 10", replayed.replayed);
    }
    Ok(())
}

#[test]
fn variables_replaced_under_the_graph_are_read_by_the_next_step() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for device in devices()? {
        let replayed = train(&device, true, 14, None, Some(7))?;
        let eager = train(&device, false, 14, None, Some(7))?;
        same(&replayed, &eager, &format!("{device}, restored before step 7"))?;
        // Replays at steps 3..=6, then watching again: 7 and 8 watched, 9 the warmup,
        // 10..=13 replays.
        ensure!(replayed.replayed == 8, "{device}: {} steps replayed of 14", replayed.replayed);
    }
    Ok(())
}
