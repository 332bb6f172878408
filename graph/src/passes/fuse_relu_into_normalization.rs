//! `Relu(FusedBatchNorm(x))` becomes one `_FusedBatchNormEx`, and the `ReluGrad` that
//! feeds the normalization's gradient joins that gradient (TensorFlow's remapper does the
//! same on GPUs).
//!
//! A ResNet's normalized activations are its largest tensors (the stem's 12.8 MB at batch
//! 128), and every pass over them goes to memory: the ReLU read them and wrote them again,
//! and its gradient read two such tensors and wrote a third. Folded, the normalization
//! writes its output once, and its gradient masks `dy` inside the two passes it makes
//! anyway, recomputing the mask from `x`, which it reads already.

use super::{Pass, fuse_bias_activation::sole_consumer, replace::replace_with_fused};
use crate::{
    Graph, NodeId, Op, Outlet, Result,
    ops::{FusedNormalization, Normalization},
};

/// Runs after autodiff, so that both halves are in the graph. The forward half folds
/// whenever the normalized output is read by the ReLU alone; the backward half only when
/// the ReLU's gradient goes nowhere but into the normalization's gradient (otherwise the
/// plain gradient op stays, reading the `ReluGrad`'s output as before, which is equally
/// right).
#[derive(Debug, Default)]
pub struct FuseReluIntoNormalization;

impl Pass for FuseReluIntoNormalization {
    fn name(&self) -> &str {
        "fuse-relu-into-normalization"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for id in g.topological_order()? {
            if !g.contains(id) {
                continue;
            }
            let Op::FusedNormalization(n) = &g.node(id).op else { continue };
            if n.kind != Normalization::Batch || n.relu {
                continue;
            }
            let Some(relu) = sole_consumer(g, Outlet::new(id, 0)).filter(|&r| matches!(g.node(r).op, Op::Relu(_)))
            else {
                continue;
            };
            let op = FusedNormalization { relu: true, ..n.clone() };
            // The ReLU's readers, and the statistics' readers, read the folded node.
            let inputs = g.node(id).inputs.clone();
            let outputs = [Outlet::from(relu), Outlet::new(id, 1), Outlet::new(id, 2)];
            let fused = replace_with_fused(g, op.clone().into(), inputs, id, id, &outputs, vec![relu, id])?;
            fold_backward(g, fused, &op)?;
            changed = true;
        }
        Ok(changed)
    }
}

/// Where `ReluGrad(relu output, dy)` is read by a `FusedBatchNormGradV3` of this
/// normalization alone, both become one gradient op that reads `dy` and, with a beta, the
/// beta.
fn fold_backward(g: &mut Graph, fused: NodeId, op: &FusedNormalization) -> Result<()> {
    let relu_out = Outlet::new(fused, 0);
    let candidates: Vec<NodeId> = g
        .outlet_consumers(relu_out)
        .into_iter()
        .filter(|&(c, input)| input == 0 && matches!(g.node(c).op, Op::ReluGrad(_)))
        .map(|(c, _)| c)
        .collect();
    let plain = FusedNormalization { relu: false, ..op.clone() }.grad_op();
    for relu_grad in candidates {
        let Some(grad) = sole_consumer(g, Outlet::from(relu_grad)) else { continue };
        let grad_node = g.node(grad).clone();
        let Op::FusedNormalizationGrad(gop) = &grad_node.op else { continue };
        let forward_inputs = &g.node(fused).inputs;
        let (x, beta) = (forward_inputs[0], forward_inputs[forward_inputs.len() - 1]);
        let inputs = &grad_node.inputs;
        let stats = [Outlet::new(fused, 1), Outlet::new(fused, 2)];
        if *gop != plain
            || inputs[0] != Outlet::from(relu_grad)
            || inputs[1] != x
            || inputs[inputs.len() - 2..] != stats
        {
            continue;
        }
        let mut new_inputs = inputs.clone();
        new_inputs[0] = g.node(relu_grad).inputs[1];
        if op.center {
            new_inputs.push(beta);
        }
        let outputs = [0, 1, 2].map(|i| Outlet::new(grad, i));
        replace_with_fused(g, op.grad_op().into(), new_inputs, grad, grad, &outputs, vec![grad, relu_grad])?;
        return Ok(());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Initializer, Shape, autodiff::gradients, ops::Padding};

    /// `relu(batch_norm(conv(x)))` into a second convolution, differentiated with respect
    /// to the first filter, gamma and beta (`center`: with a beta).
    fn backward(g: &mut Graph, center: bool) -> Result<()> {
        let mut b = GraphBuilder::new(g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[6, 6, 3]))?;
        let w1 = b.variable("w1", &[3, 3, 3, 4], Initializer::Ones, true)?;
        let w2 = b.variable("w2", &[3, 3, 4, 4], Initializer::Ones, true)?;
        let gamma = b.variable("gamma", &[4], Initializer::Ones, true)?;
        let beta = b.variable("beta", &[4], Initializer::Zeros, true)?;
        let h = b.conv2d(x, w1, [1, 1], Padding::Same)?;
        let op = FusedNormalization { kind: Normalization::Batch, epsilon: 1e-3, scale: true, center, relu: false };
        let norm = b.fused_normalization(op, h, Some(gamma), center.then_some(beta))?;
        let r = b.relu(Outlet::new(norm, 0))?;
        let c = b.conv2d(r, w2, [1, 1], Padding::Same)?;
        let loss = b.reduce_sum(c, &[0, 1, 2, 3], false)?;
        g.roles.loss = Some(loss);
        let wrt = if center { vec![w1, gamma, beta] } else { vec![w1, gamma] };
        for (i, gr) in gradients(g, loss, &wrt)?.into_iter().enumerate() {
            g.roles.fetches.insert(format!("g{i}"), gr.expect("a gradient"));
        }
        // The moving averages read the statistics.
        g.roles.fetches.insert("mean".into(), Outlet::new(norm, 1));
        Ok(())
    }

    fn count(g: &Graph, name: &str) -> usize {
        g.nodes().filter(|(_, n)| n.op.name() == name).count()
    }

    /// The first node of op `name`.
    fn first(g: &Graph, name: &str) -> NodeId {
        g.nodes().find(|(_, n)| n.op.name() == name).map(|(id, _)| id).expect("a node of that op")
    }

    fn only_node<'a>(g: &'a Graph, name: &str) -> &'a crate::Node {
        let mut it = g.nodes().filter(|(_, n)| n.op.name() == name).map(|(_, n)| n);
        let node = it.next().expect("one node");
        assert!(it.next().is_none(), "more than one {name}");
        node
    }

    #[test]
    fn the_relu_and_its_gradient_join_the_normalization() -> Result<()> {
        for center in [true, false] {
            let mut g = Graph::new();
            backward(&mut g, center)?;
            assert_eq!((count(&g, "Relu"), count(&g, "ReluGrad")), (1, 1));
            assert!(FuseReluIntoNormalization.run(&mut g)?);
            g.check()?;
            assert_eq!((count(&g, "Relu"), count(&g, "ReluGrad")), (0, 0));
            assert_eq!((count(&g, "FusedBatchNormV3"), count(&g, "FusedBatchNormGradV3")), (0, 0));
            only_node(&g, "_FusedBatchNormEx");
            // dy, x, gamma, mean, var and, with a beta, the beta.
            assert_eq!(only_node(&g, "_FusedBatchNormGradEx").inputs.len(), 5 + usize::from(center));
            assert!(!FuseReluIntoNormalization.run(&mut g)?, "a second run finds nothing");
        }
        Ok(())
    }

    #[test]
    fn a_relu_gradient_read_elsewhere_leaves_the_gradient_plain() -> Result<()> {
        let mut g = Graph::new();
        backward(&mut g, true)?;
        g.roles.fetches.insert("dy".into(), Outlet::from(first(&g, "ReluGrad")));
        assert!(FuseReluIntoNormalization.run(&mut g)?);
        g.check()?;
        only_node(&g, "_FusedBatchNormEx");
        assert_eq!((count(&g, "ReluGrad"), count(&g, "FusedBatchNormGradV3")), (1, 1));
        Ok(())
    }

    #[test]
    fn a_normalized_output_read_elsewhere_stays_apart() -> Result<()> {
        let mut g = Graph::new();
        backward(&mut g, true)?;
        g.roles.fetches.insert("y".into(), Outlet::new(first(&g, "FusedBatchNormV3"), 0));
        assert!(!FuseReluIntoNormalization.run(&mut g)?);
        assert_eq!((count(&g, "Relu"), count(&g, "_FusedBatchNormEx")), (1, 0));
        Ok(())
    }
}
