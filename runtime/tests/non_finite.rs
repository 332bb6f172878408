//! A step whose gradients or updates are not finite commits none of its assignments, with
//! the native kernels and with the generic ones, in f32 and f64, on the CPU and on each
//! device named in `ENGINE_TEST_DEVICES` (`wgpu:0`): there the checks reduce into one
//! flag that comes back with the step's fetches, and the culprits are found only when it
//! is set.

use anyhow::{Result, ensure};
use engine_graph::{
    DType, Graph, GraphBuilder, HostTensor, Initializer, Op, Plan, Shape,
    autodiff::Autodiff,
    optimizer::{ApplyOptimizer, LearningRate, Optimizer, OptimizerConfig},
    passes::{CheckNumericsPass, Pass, PassManager, optimization_passes},
};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `loss = mean(x · w + v)` trained by `optimizer`, with the numerics checks.
fn training_plan(optimizer: Optimizer, learning_rate: f32) -> Result<Plan> {
    Ok(Plan::new(training_graph(optimizer, learning_rate)?, vec![])?)
}

/// The same after the compiler's optimizations (the updates fused), as a job compiles it.
fn optimized_plan(optimizer: Optimizer, learning_rate: f32) -> Result<Plan> {
    let mut g = training_graph(optimizer, learning_rate)?;
    let mut passes = PassManager::new();
    for pass in optimization_passes() {
        passes.push(pass);
    }
    passes.run(&mut g)?;
    Ok(Plan::new(g, vec![])?)
}

fn training_graph(optimizer: Optimizer, learning_rate: f32) -> Result<Graph> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
    let w = b.variable("w", &[3, 2], Initializer::Ones, true)?;
    let v = b.variable("v", &[2], Initializer::Zeros, true)?;
    let y = b.matmul(x, w)?;
    let y = b.add(y, v)?;
    let loss = b.reduce_mean(y, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("x".into(), x);
    Autodiff.run(&mut g)?;
    let config =
        OptimizerConfig { optimizer, learning_rate: LearningRate::Constant(learning_rate), clip_global_norm: None };
    ApplyOptimizer { config }.run(&mut g)?;
    CheckNumericsPass.run(&mut g)?;
    Ok(g)
}

/// `(device, native kernels)`: the CPU's own kernels, burn's generic ones on flex, and
/// the generic ones on every listed device.
fn backends() -> Result<Vec<(Device, bool)>> {
    let mut out = vec![(Device::cpu(), true), (Device::cpu(), false)];
    for name in std::env::var("ENGINE_TEST_DEVICES").unwrap_or_default().split(',').filter(|s| !s.trim().is_empty()) {
        out.push((Device::open(name.trim().parse()?)?, false));
    }
    Ok(out)
}

fn feed(values: [f32; 6]) -> Result<BTreeMap<String, HostTensor>> {
    Ok(BTreeMap::from([("x".to_string(), HostTensor::f32(vec![2, 3], values.to_vec())?)]))
}

#[test]
fn a_nan_in_the_input_changes_no_variable_and_names_the_first_gradient() -> Result<()> {
    for (device, native) in backends()? {
        for precision in [Precision::F32, Precision::F64] {
            nan_in_the_input(&device, native, precision)?;
        }
    }
    Ok(())
}

fn nan_in_the_input(device: &Device, native: bool, precision: Precision) -> Result<()> {
    {
        let plan = Arc::new(training_plan(Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 }, 0.1)?);
        let train_op = plan.graph.roles.train_op.ok_or_else(|| anyhow::anyhow!("no train op"))?;
        let exec = Executor::new(plan, device.clone(), precision)?.with_native_kernels(native);
        let mut vars = VariableStore::new();
        exec.initialize(&mut vars, 1)?;
        let before = vars.export()?;
        let out =
            exec.run(&mut vars, &feed([1.0, f32::NAN, 3.0, 4.0, 5.0, 6.0])?, &[train_op], RunOptions::default())?;
        ensure!(vars.export()? == before, "{device} native={native} {precision:?}: a variable changed");
        let first = out.non_finite.first().ok_or_else(|| anyhow::anyhow!("nothing reported"))?;
        ensure!(first.message == "gradient of w", "{first:?}");
        ensure!((first.nan, first.infinite, first.elements) == (2, 0, 6), "{first:?}");
        ensure!(first.to_string() == "the gradient of w has 2 NaN of its 6 values", "{first}");
        // Every non-finite value is reported, in order: w's gradient, then updates (w, its
        // slots, global_step is an integer and unchecked); v's gradient is finite.
        ensure!(out.non_finite.windows(2).all(|p| p[0].order < p[1].order));
        ensure!(!out.non_finite.iter().any(|n| n.message == "gradient of v"), "{:?}", out.non_finite);
        // A finite step afterwards commits everything, the global step included.
        let out = exec.run(&mut vars, &feed([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?, &[train_op], RunOptions::default())?;
        ensure!(out.non_finite.is_empty());
        let after = vars.export()?;
        ensure!(after["w"] != before["w"] && after["global_step"] != before["global_step"]);
    }
    Ok(())
}

#[test]
fn an_update_that_overflows_is_not_committed_though_the_gradient_is_finite() -> Result<()> {
    for (device, native) in backends()? {
        overflowing_update(&device, native)?;
    }
    Ok(())
}

/// The same with the compiler's fusions, as a job runs: each update is one fused
/// elementwise pass, which on the CPU tells its check whether it wrote only finite values
/// (the check then reads nothing). An overflow in it and a NaN through Adam's fused
/// moments are still found, counted and kept from the variables; finite steps commit.
#[test]
fn fused_updates_that_are_not_finite_are_not_committed() -> Result<()> {
    let momentum = Optimizer::Sgd { momentum: 0.9, nesterov: false };
    let adam = Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 };
    let (large, nan) = ([-10.0, 20.0, 30.0, 40.0, 50.0, 60.0], [1.0, f32::NAN, 3.0, 4.0, 5.0, 6.0]);
    // Adam's step is about its learning rate whatever the gradient, so only a NaN gets
    // through it; momentum's `w - 1e38 g` overflows.
    let cases = [(momentum.clone(), 1e38, large), (momentum, 0.1, nan), (adam, 0.1, nan)];
    for (device, native) in backends()? {
        for (optimizer, learning_rate, x) in cases.clone() {
            let what = format!("{device} native={native} {optimizer:?}");
            let plan = Arc::new(optimized_plan(optimizer.clone(), learning_rate)?);
            let fused = plan.graph.nodes().filter(|(_, n)| matches!(n.op, Op::FusedElementwise(_))).count();
            ensure!(fused > 0, "{what}: no update was fused");
            let train_op = plan.graph.roles.train_op.ok_or_else(|| anyhow::anyhow!("no train op"))?;
            let exec = Executor::new(plan, device.clone(), Precision::F32)?.with_native_kernels(native);
            let mut vars = VariableStore::new();
            exec.initialize(&mut vars, 1)?;
            let before = vars.export()?;
            let out = exec.run(&mut vars, &feed(x)?, &[train_op], RunOptions::default())?;
            ensure!(vars.export()? == before, "{what}, {x:?}: a variable changed");
            let w = out.non_finite.iter().find(|n| n.message == "update of w");
            ensure!(w.is_some_and(|w| w.nan + w.infinite > 0), "{what}, {x:?}: {:?}", out.non_finite);
            if learning_rate < 1.0 {
                let out =
                    exec.run(&mut vars, &feed([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?, &[train_op], RunOptions::default())?;
                ensure!(out.non_finite.is_empty(), "{what}: {:?}", out.non_finite);
                ensure!(vars.export()?["w"] != before["w"], "{what}: a finite step committed nothing");
            }
        }
    }
    Ok(())
}

fn overflowing_update(device: &Device, native: bool) -> Result<()> {
    let plan = Arc::new(training_plan(Optimizer::Sgd { momentum: 0.0, nesterov: false }, 1e38)?);
    let train_op = plan.graph.roles.train_op.ok_or_else(|| anyhow::anyhow!("no train op"))?;
    let exec = Executor::new(plan, device.clone(), Precision::F32)?.with_native_kernels(native);
    let mut vars = VariableStore::new();
    exec.initialize(&mut vars, 1)?;
    let before = vars.export()?;
    let out = exec.run(&mut vars, &feed([-10.0, 20.0, 30.0, 40.0, 50.0, 60.0])?, &[train_op], RunOptions::default())?;
    ensure!(vars.export()? == before, "{device} native={native}: a variable changed");
    let messages: Vec<&str> = out.non_finite.iter().map(|n| n.message.as_str()).collect();
    ensure!(messages == ["update of w"], "{device} native={native}: {messages:?}");
    ensure!(out.non_finite[0].infinite > 0);
    Ok(())
}
