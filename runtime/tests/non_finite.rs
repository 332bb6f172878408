//! A step whose gradients or updates are not finite commits none of its assignments, with
//! the native kernels and with the generic ones, in f32 and f64, on the CPU and on each
//! device named in `ENGINE_TEST_DEVICES` (`wgpu:0`): there the checks reduce into one
//! flag that comes back with the step's fetches, and the culprits are found only when it
//! is set.

use anyhow::{Result, ensure};
use engine_graph::{
    DType, Graph, GraphBuilder, HostTensor, Initializer, Plan, Shape,
    autodiff::Autodiff,
    optimizer::{ApplyOptimizer, LearningRate, Optimizer, OptimizerConfig},
    passes::{CheckNumericsPass, Pass},
};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `loss = mean(x · w + v)` trained by `optimizer`, with the numerics checks.
fn training_plan(optimizer: Optimizer, learning_rate: f32) -> Result<Plan> {
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
    Ok(Plan::new(g, vec![])?)
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
