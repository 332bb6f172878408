use super::*;
use crate::{
    DType, Initializer, Shape,
    autodiff::Autodiff,
    optimizer::{ApplyOptimizer, LearningRate, Optimizer, OptimizerConfig},
    passes::{CheckNumericsPass, PassManager, optimization_passes},
};

/// Two dense layers trained with Adam (slots, a global-step-dependent step size), a decaying
/// learning rate and global-norm clipping: everything the placement must keep apart.
fn trained(optimizer: Optimizer, num_ps: usize) -> Result<Graph> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
    let w1 = b.variable("w1", &[3, 4], Initializer::Ones, true)?;
    let w2 = b.variable("w2", &[4, 2], Initializer::Ones, true)?;
    let h = b.matmul(x, w1)?;
    let h = b.relu(h)?;
    let y = b.matmul(h, w2)?;
    let loss = b.reduce_mean(y, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("x".into(), x);
    let config = OptimizerConfig {
        optimizer,
        learning_rate: LearningRate::ExponentialDecay {
            initial: 0.1,
            decay_steps: 10,
            decay_rate: 0.5,
            staircase: false,
        },
        clip_global_norm: Some(1.0),
    };
    let mut passes = PassManager::new()
        .with(Autodiff)
        .with(ApplyOptimizer { config })
        .with(CheckNumericsPass)
        .with(ParameterServerPlacement { num_ps });
    for p in optimization_passes() {
        passes.push(p);
    }
    passes.run(&mut g)?;
    g.check()?;
    Ok(g)
}

fn device(g: &Graph, name: &str) -> Result<String> {
    Ok(g.node(g.find(name)?).placement.map(|p| p.to_string()).unwrap_or_default())
}

fn adam() -> Optimizer {
    Optimizer::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-7 }
}

#[test]
fn variables_go_round_robin_with_their_slots() -> Result<()> {
    let g = trained(adam(), 2)?;
    assert_eq!(device(&g, "w1")?, "ps:0");
    assert_eq!(device(&g, "w1/Adam")?.as_str(), "ps:0", "a slot lives with its variable");
    assert_eq!(device(&g, "w2")?, "ps:1");
    assert_eq!(device(&g, "w2/Adam_1")?, "ps:1");
    assert_eq!(device(&g, "global_step")?, "ps:0");
    assert_eq!(device(&g, "x")?, "worker");
    Ok(())
}

#[test]
fn updates_run_on_the_variables_ps_and_everything_else_on_the_worker() -> Result<()> {
    for num_ps in [1, 2, 3] {
        let g = trained(adam(), num_ps)?;
        for (_, n) in g.nodes() {
            let here = n.placement.unwrap_or(WORKER);
            if let Op::Assign(_) = n.op {
                let var = g.node(n.inputs[0].node);
                assert_eq!(Some(here), var.placement, "{} runs away from {}", n.name, var.name);
            }
            match &n.op {
                Op::Transfer(t) => {
                    assert_eq!(here, t.to);
                    let src = g.node(n.inputs[0].node);
                    let from = src.placement.unwrap_or(WORKER);
                    assert_ne!(from, here, "{} transfers within {here}", n.name);
                    assert!(from == WORKER || here == WORKER, "{} goes from {from} to {here} directly", n.name);
                    if here == WORKER {
                        assert!(
                            matches!(src.op, Op::Variable(_)),
                            "the worker reads {} ({}), which is not a variable",
                            src.name,
                            src.op.name()
                        );
                    }
                }
                _ => {
                    for o in &n.inputs {
                        assert_eq!(
                            g.node(o.node).placement,
                            n.placement,
                            "{} reads {} across devices",
                            n.name,
                            g.node(o.node).name
                        );
                    }
                }
            }
        }
        // The schedule and, across ps tasks, the global norm are the worker's; the gradients are checked
        // before they leave it.
        let lr = g.roles.fetches["learning_rate"];
        assert_eq!(g.node(lr.node).placement, Some(WORKER));
        // (With one ps task the norm needs only its gradients, and is computed there.)
        assert!(
            num_ps == 1
                || g.nodes().any(|(_, n)| n.name.contains("clip_by_global_norm/Sqrt") && n.placement == Some(WORKER))
        );
        for (_, n) in g.nodes().filter(|(_, n)| matches!(n.op, Op::CheckNumerics(_))) {
            let on_worker = n.placement == Some(WORKER);
            assert_eq!(on_worker, n.name.contains("gradient"), "{} on {:?}", n.name, n.placement);
        }
        let train_op = g.roles.train_op.ok_or_else(|| crate::GraphError::invalid("test", "no train op"))?;
        assert_eq!(g.node(train_op.node).placement, Some(WORKER));
        for k in 0..num_ps.min(2) {
            assert!(g.roles.fetches.contains_key(&format!("train_op/ps:{k}")), "no assignments grouped on ps:{k}");
        }
    }
    Ok(())
}

#[test]
fn the_global_step_is_incremented_on_its_ps() -> Result<()> {
    let g = trained(Optimizer::Sgd { momentum: 0.9, nesterov: false }, 2)?;
    let assign = g
        .nodes()
        .find(|(_, n)| matches!(n.op, Op::Assign(_)) && g.node(n.inputs[0].node).name == "global_step")
        .map(|(id, _)| id)
        .ok_or_else(|| crate::GraphError::invalid("test", "no global step assignment"))?;
    let value = g.node(g.node(assign).inputs[1].node);
    assert_eq!(value.placement, Some(Placement::Ps(0)), "{} computes the next step off the ps", value.name);
    let (read, sent) = transfer_bytes(&g, 8)?;
    // Worker reads: w1, w2 (and the global step); sends: their gradients and the rate.
    assert!(read >= (12 + 8) * 4 && sent >= (12 + 8) * 4, "read {read}, sent {sent}");
    Ok(())
}

/// An embedding table of 1000 rows of 8 behind a dense layer, trained with momentum: the
/// worker sends the looked-up rows and their ids, never the table's gradient, and the ps
/// task assembles it, restricts the update to those rows and checks nothing the worker
/// has not checked.
#[test]
fn an_embedding_gradient_travels_as_its_looked_up_rows() -> Result<()> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let ids = b.placeholder("ids", DType::I64, Shape::batched(&[4]))?;
    let table = b.variable("table", &[1000, 8], Initializer::Ones, true)?;
    let w = b.variable("w", &[32, 2], Initializer::Ones, true)?;
    let e = b.gather(table, ids)?;
    let e = b.reshape(e, Shape(vec![crate::Dim::N, crate::Dim::Known(32)]))?;
    let y = b.matmul(e, w)?;
    let loss = b.reduce_mean(y, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("ids".into(), ids);
    let config = OptimizerConfig::constant(Optimizer::Sgd { momentum: 0.9, nesterov: false }, 0.1);
    let mut passes = PassManager::new()
        .with(Autodiff)
        .with(ApplyOptimizer { config })
        .with(CheckNumericsPass)
        .with(ParameterServerPlacement { num_ps: 2 });
    for p in optimization_passes() {
        passes.push(p);
    }
    passes.run(&mut g)?;
    g.check()?;
    let on = |op: fn(&Op) -> bool| -> Vec<String> {
        g.nodes()
            .filter(|(_, n)| op(&n.op))
            .map(|(_, n)| n.placement.map(|p| p.to_string()).unwrap_or_default())
            .collect()
    };
    assert_eq!(on(|o| matches!(o, Op::ScatterAddRows(_))), ["ps:0"], "the gradient is assembled with the table");
    assert_eq!(on(|o| matches!(o, Op::RowsTouched(_))), ["ps:0"]);
    assert_eq!(on(|o| matches!(o, Op::Select(_))).len(), 2, "momentum and table keep their untouched rows");
    assert!(on(|o| matches!(o, Op::CheckNumerics(_))).len() >= 2);
    for (_, n) in g.nodes() {
        if let Op::CheckNumerics(c) = &n.op
            && c.message.starts_with("gradient")
        {
            assert_eq!(n.placement, Some(WORKER), "{} checks on a ps task", n.name);
        }
    }
    // Per example, the worker sends 4 ids and 4 rows of 8; then w's gradient (64 floats)
    // and the learning rate to each ps task: never the table's 8000 floats.
    let (_, sent) = transfer_bytes(&g, 16)?;
    assert_eq!(sent, 16 * 4 * (8 + 8 * 4) + 32 * 2 * 4 + 2 * 4, "sent {sent} bytes");
    Ok(())
}
