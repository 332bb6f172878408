//! `train_spec.class_weight`, Keras' `fit(class_weight=...)`: the training loss weighs each
//! example by its class's weight and still divides by the batch size; evaluation's loss is
//! not weighted; a weight for a class the model lacks, or on a loss without classes, is
//! refused with the field named.

mod common;

use anyhow::{Context, Result, ensure};
use engine_cli::lower::{eval_plan, training_plan};
use engine_cli::spec::{Spec, StrategyKind};
use engine_graph::{HostTensor, Plan};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;

const MLP: &str = include_str!("../../specs/fashion_mnist_mlp.ron");
const BATCH: usize = 8;

fn mlp(class_weight: &str) -> Result<Spec> {
    let text = MLP.replace("train_spec: (max_steps: 1406)", &format!("train_spec: (max_steps: 1406{class_weight})"));
    Ok(Spec::parse(&text, "mlp.ron", &[])?)
}

/// Images from a fixed generator, and `labels`.
fn feeds(plan: &Plan, labels: &[i64]) -> Result<BTreeMap<String, HostTensor>> {
    common::feeds::fixed_feeds(plan, BATCH, 99, |i| labels[i % labels.len()])
}

/// The loss and the first layer's kernel gradient (training plans), or the loss alone, from
/// the variables `init`.
fn run(plan: Plan, init: &BTreeMap<String, HostTensor>, labels: &[i64]) -> Result<Vec<f64>> {
    let plan = Arc::new(plan);
    let cpu = Device::cpu();
    let exec = Executor::new(plan.clone(), cpu.clone(), Precision::F32)?;
    let mut store = VariableStore::new();
    store.import(&plan.graph, init, cpu.dispatch(), Precision::F32)?;
    let roles = &plan.graph.roles;
    let mut fetches: Vec<_> = roles.loss.into_iter().collect();
    fetches.extend(roles.gradients.first().map(|(_, g)| *g));
    let out =
        exec.run(&mut store, &feeds(&plan, labels)?, &fetches, RunOptions { step: 3, ..RunOptions::default() })?;
    let mut values = Vec::new();
    for v in &out.fetched {
        values.extend(v.to_host()?.to_f64_vec());
    }
    Ok(values)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1e-6)
}

#[test]
fn the_training_loss_weighs_examples_by_class_and_evaluation_does_not() -> Result<()> {
    let plain = mlp("")?;
    let weighted = mlp(", class_weight: {3: 2.5, 0: 7.0}")?;
    let mut init = VariableStore::new();
    Executor::new(Arc::new(training_plan(&plain, StrategyKind::Default)?), Device::cpu(), Precision::F32)?
        .initialize(&mut init, 42)?;
    let init = init.export()?;

    // Every example of class 3: the loss and its gradients are 2.5 times the plain ones.
    let threes = [3i64; BATCH];
    let base = run(training_plan(&plain, StrategyKind::Default)?, &init, &threes)?;
    let got = run(training_plan(&weighted, StrategyKind::Default)?, &init, &threes)?;
    ensure!(base.len() == got.len() && base.len() > 1, "{} values", base.len());
    ensure!(base[0] > 0.0, "the plain loss is positive");
    ensure!(close(2.5 * base[0], got[0]), "loss {} against 2.5 x {}", got[0], base[0]);
    // The gradient's elements to f32 rounding of its largest.
    let scale = base[1..].iter().fold(0.0f64, |m, x| m.max(x.abs()));
    for (i, (b, g)) in base.iter().zip(&got).enumerate().skip(1) {
        ensure!((2.5 * b - g).abs() <= 1e-5 * 2.5 * scale, "gradient {i}: {g} against 2.5 x {b}");
    }

    // Mixed classes, with 0 and 3 (present) weighted 0 and the rest (absent) 1: the loss is
    // what the other examples contribute, over the whole batch; all weights 1 change nothing.
    let mixed: Vec<i64> = (0..BATCH as i64).map(|i| [0, 3, 5, 3, 0, 5, 5, 3][i as usize]).collect();
    let some = mlp(", class_weight: {0: 0.0, 3: 0.0}")?;
    let fives_only = run(training_plan(&some, StrategyKind::Default)?, &init, &mixed)?[0];
    let ones = mlp(", class_weight: {0: 1.0, 3: 1.0, 5: 1.0}")?;
    let all = run(training_plan(&ones, StrategyKind::Default)?, &init, &mixed)?[0];
    let plain_mixed = run(training_plan(&plain, StrategyKind::Default)?, &init, &mixed)?[0];
    ensure!(close(all, plain_mixed), "weights of 1: {all} against {plain_mixed}");
    ensure!(fives_only > 0.0 && fives_only < plain_mixed, "{fives_only} of {plain_mixed}");
    let none = mlp(", class_weight: {0: 0.0, 3: 0.0, 5: 0.0}")?;
    let zero = run(training_plan(&none, StrategyKind::Default)?, &init, &mixed)?[0];
    ensure!(zero == 0.0, "every present class weighted 0: {zero}");

    // Evaluation's loss is the plain one.
    let eval_plain = run(eval_plan(&plain, StrategyKind::Default)?, &init, &threes)?[0];
    let eval_weighted = run(eval_plan(&weighted, StrategyKind::Default)?, &init, &threes)?[0];
    ensure!(eval_plain == eval_weighted, "{eval_weighted} against {eval_plain}");
    Ok(())
}

#[test]
fn class_weights_the_model_cannot_use_are_refused_by_field() -> Result<()> {
    let spec = mlp(", class_weight: {12: 2.0}")?;
    let err = training_plan(&spec, StrategyKind::Default).err().context("class 12 of 10 accepted")?;
    let text = err.to_string();
    ensure!(
        text.contains("train_spec.class_weight") && text.contains("class 12 is not one of the model's 10"),
        "{text}"
    );

    let text = MLP
        .replace("loss: SparseCategoricalCrossentropy(from_logits: true)", "loss: MeanSquaredError")
        .replace("metrics: [Accuracy]", "metrics: []")
        .replace("train_spec: (max_steps: 1406)", "train_spec: (max_steps: 1406, class_weight: {1: 2.0})");
    let err = Spec::parse(&text, "mse.ron", &[]).err().context("class_weight on a regression accepted")?;
    ensure!(err.to_string().contains("class_weight") && err.to_string().contains("MeanSquaredError"), "{err}");

    let negative =
        MLP.replace("train_spec: (max_steps: 1406)", "train_spec: (max_steps: 1406, class_weight: {1: -1.0})");
    let err = Spec::parse(&negative, "neg.ron", &[]).err().context("a negative weight accepted")?;
    ensure!(err.to_string().contains("must be finite and >= 0"), "{err}");
    Ok(())
}
