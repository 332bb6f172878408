//! RMSProp's two forms against their formulas, two steps on `loss = sum(w · x)` (so the
//! gradient is `x`), in f64: TensorFlow 1's (mean square from one, epsilon inside the root)
//! and Keras' (from zero, epsilon after the root), each with and without momentum.

use anyhow::{Result, ensure};
use engine_graph::{
    DType, Graph, GraphBuilder, HostTensor, Initializer, Plan, Shape,
    autodiff::Autodiff,
    optimizer::{ApplyOptimizer, Optimizer, OptimizerConfig},
    passes::Pass,
};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;

const LR: f64 = 0.01;
const DECAY: f64 = 0.9;
const EPSILON: f64 = 1e-7;

fn plan(keras: bool, momentum: f32) -> Result<Plan> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[2]))?;
    let w = b.variable("w", &[2], Initializer::Constant(0.5), true)?;
    let y = b.mul(x, w)?;
    let loss = b.reduce_sum(y, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("x".into(), x);
    Autodiff.run(&mut g)?;
    let optimizer =
        Optimizer::RmsProp { decay: DECAY as f32, momentum, epsilon: EPSILON as f32, centered: false, keras };
    ApplyOptimizer { config: OptimizerConfig::constant(optimizer, LR as f32) }.run(&mut g)?;
    Ok(Plan::new(g, vec![])?)
}

/// The formula's `w` after one step per gradient in `grads`.
fn expected(keras: bool, momentum: f64, grads: &[f64]) -> f64 {
    let (mut w, mut ms, mut mom) = (0.5, if keras { 0.0 } else { 1.0 }, 0.0);
    for g in grads {
        ms = DECAY * ms + (1.0 - DECAY) * g * g;
        let denom = if keras { ms.sqrt() + EPSILON } else { (ms + EPSILON).sqrt() };
        mom = momentum * mom + LR * g / denom;
        w -= mom;
    }
    w
}

#[test]
fn both_forms_follow_their_formulas() -> Result<()> {
    let grads: [[f32; 2]; 2] = [[2.0, -0.5], [1.0, 3.0]];
    for keras in [false, true] {
        for momentum in [0.0, 0.9] {
            let exec = Executor::new(Arc::new(plan(keras, momentum as f32)?), Device::cpu(), Precision::F64)?;
            let train_op = exec.plan().graph.roles.train_op.ok_or_else(|| anyhow::anyhow!("no train op"))?;
            let mut vars = VariableStore::new();
            exec.initialize(&mut vars, 1)?;
            for g in grads {
                let feed = BTreeMap::from([("x".to_string(), HostTensor::f32(vec![1, 2], g.to_vec())?)]);
                exec.run(&mut vars, &feed, &[train_op], RunOptions::default())?;
            }
            let w = vars.export()?["w"].to_f64_vec();
            for (i, got) in w.iter().enumerate() {
                let want = expected(keras, momentum, &[f64::from(grads[0][i]), f64::from(grads[1][i])]);
                ensure!((got - want).abs() <= 1e-6, "keras={keras} momentum={momentum}: w[{i}] = {got}, want {want}");
            }
        }
    }
    // The first step shows the difference: Keras moves by about lr / sqrt(1 - decay).
    ensure!((expected(true, 0.0, &[2.0]) - (0.5 - LR / 0.1f64.sqrt())).abs() < 1e-6);
    // TensorFlow 1's mean square starts at one: a first step of lr·g/sqrt(1.3), smaller.
    ensure!((0.5 - expected(false, 0.0, &[2.0]) - LR * 2.0 / 1.3f64.sqrt()).abs() < 1e-6);
    Ok(())
}
