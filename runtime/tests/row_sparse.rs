//! Row-sparse gradients (embedding lookups) at run time: sparse momentum touches only the
//! looked-up rows, Adam stays dense as in TensorFlow, and `AllGatherRows` adds every
//! replica's rows, uneven batches included, into the same bits on every replica.

use anyhow::{Result, anyhow, ensure};
use engine_graph::{
    DType, Graph, GraphBuilder, HostData, HostTensor, Initializer, Op, Plan, Shape,
    autodiff::Autodiff,
    ops::ReduceOp,
    optimizer::{ApplyOptimizer, Optimizer, OptimizerConfig},
    passes::Pass,
};
use engine_runtime::{CrossDeviceOps, Device, Executor, InProcessGroup, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const LR: f64 = 0.1;
const MOMENTUM: f64 = 0.9;

/// `loss = sum(table[ids] * weights)`, so row `i`'s gradient is the sum of the weights of
/// the positions that look it up.
fn lookup_plan(optimizer: Optimizer) -> Result<Plan> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let ids = b.placeholder("ids", DType::I64, Shape::batched(&[]))?;
    let weights = b.placeholder("weights", DType::F32, Shape::batched(&[2]))?;
    let table = b.variable("table", &[5, 2], Initializer::Constant(1.0), true)?;
    let rows = b.gather(table, ids)?;
    let y = b.mul(rows, weights)?;
    let loss = b.reduce_sum(y, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("ids".into(), ids);
    g.roles.inputs.insert("weights".into(), weights);
    Autodiff.run(&mut g)?;
    ApplyOptimizer { config: OptimizerConfig::constant(optimizer, LR as f32) }.run(&mut g)?;
    Ok(Plan::new(g, vec![])?)
}

fn feeds(ids: &[i64], weights: &[f32]) -> Result<BTreeMap<String, HostTensor>> {
    Ok(BTreeMap::from([
        ("ids".to_string(), HostTensor::i64(vec![ids.len()], ids.to_vec())?),
        ("weights".to_string(), HostTensor::f32(vec![ids.len(), 2], weights.to_vec())?),
    ]))
}

/// Trains one step per `(ids, weights)` and returns the table.
fn train(optimizer: Optimizer, steps: &[(&[i64], &[f32])]) -> Result<(Plan, Vec<f64>)> {
    let plan = lookup_plan(optimizer)?;
    let exec = Executor::new(Arc::new(plan.clone()), Device::cpu(), Precision::F64)?;
    let train_op = exec.plan().graph.roles.train_op.ok_or_else(|| anyhow!("no train op"))?;
    let mut vars = VariableStore::new();
    exec.initialize(&mut vars, 1)?;
    for (ids, weights) in steps {
        exec.run(&mut vars, &feeds(ids, weights)?, &[train_op], RunOptions::default())?;
    }
    let table = vars.get("table").ok_or_else(|| anyhow!("no table"))?.to_f64_vec()?;
    Ok((plan, table))
}

const STEPS: [(&[i64], &[f32]); 2] = [(&[1, 3, 1], &[1.0, 2.0, 0.5, 0.5, 3.0, -1.0]), (&[2], &[1.0, 1.0])];

#[test]
fn momentum_moves_only_the_rows_a_step_looks_up() -> Result<()> {
    let (plan, table) = train(Optimizer::Sgd { momentum: MOMENTUM as f32, nesterov: false }, &STEPS)?;
    let count = |f: fn(&Op) -> bool| plan.graph.nodes().filter(|(_, n)| f(&n.op)).count();
    ensure!(count(|o| matches!(o, Op::RowsTouched(_))) == 1, "no mask of looked-up rows in the plan");
    // Step 1: row 1's gradient is (1 + 3, 2 - 1), row 3's (0.5, 0.5); accum = g, w -= lr g.
    // Step 2 looks up row 2 only: rows 1 and 3 keep their weights (dense momentum would
    // move them by lr * 0.9 * accum again), row 2 moves by lr * (1, 1).
    let want = [
        [1.0, 1.0],
        [1.0 - LR * 4.0, 1.0 - LR * 1.0],
        [1.0 - LR, 1.0 - LR],
        [1.0 - LR * 0.5, 1.0 - LR * 0.5],
        [1.0, 1.0],
    ];
    for (i, w) in want.iter().flatten().enumerate() {
        // The learning rate is an f32 constant: 0.1 to 1e-8.
        ensure!((table[i] - w).abs() < 1e-7, "table[{i}] = {}, want {w} (table {table:?})", table[i]);
    }
    Ok(())
}

/// TensorFlow's (and Keras') sparse Adam decays both moments of every row and moves every
/// row that has momentum: the same as dense Adam, so it is left dense.
#[test]
fn adam_stays_dense_as_in_tensorflow() -> Result<()> {
    let adam = Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 };
    let (plan, two) = train(adam.clone(), &STEPS)?;
    ensure!(!plan.graph.nodes().any(|(_, n)| matches!(n.op, Op::RowsTouched(_))));
    let (_, one) = train(adam, &STEPS[..1])?;
    ensure!((two[2] - one[2]).abs() > 1e-6, "row 1 did not move in step 2 ({} vs {})", two[2], one[2]);
    ensure!(two[0] == 1.0 && two[8] == 1.0, "never looked-up rows moved: {two:?}");
    Ok(())
}

#[test]
fn an_index_outside_the_table_is_an_error_naming_the_node() -> Result<()> {
    let plan = lookup_plan(Optimizer::Sgd { momentum: 0.5, nesterov: false })?;
    let exec = Executor::new(Arc::new(plan), Device::cpu(), Precision::F32)?;
    let train_op = exec.plan().graph.roles.train_op.ok_or_else(|| anyhow!("no train op"))?;
    let mut vars = VariableStore::new();
    exec.initialize(&mut vars, 1)?;
    let err = exec.run(&mut vars, &feeds(&[1, 5], &[1.0; 4])?, &[train_op], RunOptions::default());
    let msg = format!("{}", err.err().ok_or_else(|| anyhow!("index 5 of a 5-row table was accepted"))?);
    ensure!(msg.contains("index 5 is outside the table's 5 rows"), "{msg}");
    Ok(())
}

/// `AllGatherRows` over 3 in-process replicas with 2, 1 and 3 rows (uneven batches).
fn gather_plan(reduce: ReduceOp) -> Result<Plan> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let ids = b.placeholder("ids", DType::I64, Shape::batched(&[]))?;
    let weights = b.placeholder("weights", DType::F32, Shape::batched(&[2]))?;
    let (sum, touched) = b.all_gather_rows(ids, weights, 4, reduce)?;
    g.roles.fetches.insert("sum".into(), sum);
    g.roles.fetches.insert("touched".into(), touched);
    Ok(Plan::new(g, vec![])?)
}

#[test]
fn all_gather_rows_adds_every_replicas_rows_into_the_same_bits() -> Result<()> {
    let parts: [(&[i64], Vec<f32>); 3] = [
        (&[0, 2], vec![1.0, 2.0, 3.0, 4.0]),
        (&[2], vec![0.1, 0.2]),
        (&[3, 0, 2], vec![1e-3, 5.0, 6.0, 7.0, 1.0, -1.0]),
    ];
    for precision in [Precision::F32, Precision::F64] {
        for reduce in [ReduceOp::Sum, ReduceOp::Mean] {
            let plan = Arc::new(gather_plan(reduce)?);
            let group = InProcessGroup::new(3, CrossDeviceOps::Ring, Duration::from_secs(30));
            let results: Vec<Result<(Vec<f64>, Vec<bool>)>> = std::thread::scope(|s| {
                let handles: Vec<_> = group
                    .handles()
                    .into_iter()
                    .zip(&parts)
                    .map(|(member, (ids, w))| {
                        let plan = plan.clone();
                        s.spawn(move || -> Result<(Vec<f64>, Vec<bool>)> {
                            let exec = Executor::new(plan, Device::cpu(), precision)?.with_collective(member);
                            let fetch =
                                [exec.plan().graph.roles.fetches["sum"], exec.plan().graph.roles.fetches["touched"]];
                            let out =
                                exec.run(&mut VariableStore::new(), &feeds(ids, w)?, &fetch, RunOptions::default())?;
                            let mask = match out.fetched[1].to_host()?.data {
                                HostData::Bool(m) => m,
                                other => return Err(anyhow!("mask is {other:?}")),
                            };
                            Ok((out.fetched[0].to_f64_vec()?, mask))
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().map_err(|_| anyhow!("replica panicked"))?).collect()
            });
            let results = results.into_iter().collect::<Result<Vec<_>>>()?;
            let scale = if reduce == ReduceOp::Mean { 1.0 / 3.0 } else { 1.0 };
            // Row 0: 1 + 6 and 2 + 7; row 2: 3 + 0.1 + 1, 4 + 0.2 - 1; row 3: 1e-3, 5.
            let f = |x: f32| x as f64;
            let want = [
                f(1.0) + f(6.0),
                f(2.0) + f(7.0),
                0.0,
                0.0,
                f(3.0) + f(0.1) + f(1.0),
                f(4.0) + f(0.2) + f(-1.0),
                f(1e-3),
                f(5.0),
            ];
            for (r, (sum, mask)) in results.iter().enumerate() {
                ensure!(sum.to_vec() == results[0].0, "replica {r} differs from replica 0");
                ensure!(mask == &[true, false, true, true], "replica {r}'s mask {mask:?}");
                for (i, w) in want.iter().enumerate() {
                    let tol = if precision == Precision::F64 { 1e-15 } else { 1e-6 };
                    ensure!((sum[i] - w * scale).abs() <= tol, "{precision:?} {reduce}: sum[{i}] = {}", sum[i]);
                }
            }
        }
    }
    Ok(())
}
