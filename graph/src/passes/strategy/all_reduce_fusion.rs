//! Groups gradient all-reduces into buckets (PyTorch DDP's reducer, as a graph pass).

use crate::{
    Graph, NodeId, Op, Outlet, Result,
    ops::{AllReduce, ReduceOp},
    passes::Pass,
};
use std::collections::BTreeMap;

/// Packs single-tensor all-reduces into buckets, closing a bucket as soon as it holds at
/// least `bucket_bytes` (`first_bucket_bytes` for the first, so communication starts early)
/// — DDP's `compute_bucket_assignment_by_size`, so a bucket exceeds its cap by at most its
/// last tensor. Closing *after* the tensor that reaches the cap, rather than before it,
/// matters when one large gradient comes early in the backward pass (the CNN's dense
/// kernel, 1.3 MiB): it rides in bucket 0 and is reduced while the convolution's backward
/// runs, instead of opening a bucket that waits for the last gradient of the step. Tensors are taken in the order their gradients are
/// produced — the backward pass runs from the loss towards the inputs, so this is the
/// reverse of the forward order — which is deterministic and identical on every replica:
/// each replica launches bucket 0, 1, 2, ... in the same order, the condition for
/// collectives not to deadlock or mix up. A bucket can start as soon as its last
/// gradient exists, while the backward pass computes the rest.
///
/// The loss's all-reduce ([`AllReduceLoss`](super::AllReduceLoss)), when there is one,
/// joins the *last* bucket, whatever its size:
/// - its value exists before any gradient, so it never holds a bucket back, and it is only
///   read when the step ends, which waits for the last bucket anyway;
/// - sorted by readiness it would open bucket 0, the small one meant to start
///   communication early: a first gradient larger than the rest of that cap would then be
///   pushed out, leaving the loss alone in an extra one-scalar collective;
/// - packing it past the cap (a few bytes) rather than opening a bucket of its own keeps
///   the gradients' buckets exactly as they are without it, and the collective count too.
pub struct AllReduceFusion {
    pub bucket_bytes: usize,
    pub first_bucket_bytes: usize,
}

impl AllReduceFusion {
    /// PyTorch's defaults: 25 MiB buckets, a 1 MiB first bucket.
    pub fn default_sizes() -> Self {
        AllReduceFusion { bucket_bytes: 25 << 20, first_bucket_bytes: 1 << 20 }
    }
}

/// One bucket of a compiled plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub index: usize,
    pub node: NodeId,
    /// Gradient node names, in packing order.
    pub tensors: Vec<String>,
    pub bytes: usize,
}

/// The buckets of a graph, in launch order.
pub fn buckets(g: &Graph) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = g
        .nodes()
        .filter_map(|(id, n)| match &n.op {
            Op::AllReduce(a) if !a.immediate => Some(Bucket {
                index: a.bucket,
                node: id,
                tensors: n
                    .inputs
                    .iter()
                    .map(|o| {
                        if o.output == 0 {
                            g.node(o.node).name.clone()
                        } else {
                            format!("{}:{}", g.node(o.node).name, o.output)
                        }
                    })
                    .collect(),
                bytes: n.outputs.iter().map(|f| f.bytes(1)).sum(),
            }),
            _ => None,
        })
        .collect();
    out.sort_by_key(|b| b.index);
    out
}

impl Pass for AllReduceFusion {
    fn name(&self) -> &str {
        "all-reduce-fusion"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let order = g.topological_order()?;
        let position: BTreeMap<NodeId, usize> = order.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let reduce_of = |id: NodeId| match &g.node(id).op {
            Op::AllReduce(a) => Some(a.reduce),
            _ => None,
        };
        // The loss's single all-reduce, packed apart from the gradients' (see above).
        let loss = g.roles.loss.map(|o| o.node).filter(|&id| reduce_of(id).is_some() && g.node(id).inputs.len() == 1);
        // Single-tensor all-reduces, keyed by when their input becomes available.
        let mut singles: Vec<(usize, NodeId, ReduceOp)> = g
            .nodes()
            .filter_map(|(id, n)| match &n.op {
                Op::AllReduce(a) if n.inputs.len() == 1 && Some(id) != loss && !a.immediate => {
                    Some((position[&n.inputs[0].node], id, a.reduce))
                }
                _ => None,
            })
            .collect();
        if singles.len() + usize::from(loss.is_some()) < 2 {
            return Ok(false);
        }
        singles.sort();
        let mut groups: Vec<Vec<NodeId>> = Vec::new();
        let mut current: Vec<NodeId> = Vec::new();
        let mut bytes = 0usize;
        for &(_, id, reduce) in &singles {
            let size: usize = g.node(id).outputs.iter().map(|f| f.bytes(1)).sum();
            let same_op = current.first().is_none_or(|&c| reduce_of(c) == Some(reduce));
            if !current.is_empty() && !same_op {
                groups.push(std::mem::take(&mut current));
                bytes = 0;
            }
            current.push(id);
            bytes += size;
            let cap = if groups.is_empty() { self.first_bucket_bytes } else { self.bucket_bytes };
            if bytes >= cap {
                groups.push(std::mem::take(&mut current));
                bytes = 0;
            }
        }
        if !current.is_empty() {
            groups.push(current);
        }
        if let Some(loss) = loss {
            match groups.last_mut() {
                Some(last) if reduce_of(last[0]) == reduce_of(loss) => last.push(loss),
                _ => groups.push(vec![loss]),
            }
        }
        for (index, group) in groups.iter().enumerate() {
            let reduce = match &g.node(group[0]).op {
                Op::AllReduce(a) => a.reduce,
                _ => ReduceOp::Sum,
            };
            let inputs: Vec<Outlet> = group.iter().map(|&id| g.node(id).inputs[0]).collect();
            let name = g.unique_name(&format!("allreduce/bucket_{index}"));
            let placement = g.node(group[0]).placement;
            let fused = g.add_node(name, AllReduce { reduce, bucket: index, immediate: false }.into(), inputs)?;
            g.set_placement(fused, placement);
            for (i, &old) in group.iter().enumerate() {
                g.replace_uses(Outlet::from(old), Outlet::new(fused, i))?;
                g.remove_node(old)?;
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        DType, GraphBuilder, Initializer, Shape,
        autodiff::Autodiff,
        passes::{
            Pass,
            strategy::{AllReduceGradients, AllReduceLoss},
        },
    };

    /// Three dense layers of 4x40, 40x40, 40x3 floats: 640, 6400 and 480 bytes of kernels.
    fn mlp() -> Result<Graph> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let mut h = b.placeholder("x", DType::F32, Shape::batched(&[4]))?;
        for (i, (a, c)) in [(4, 40), (40, 40), (40, 3)].into_iter().enumerate() {
            let w = b.variable(&format!("w{i}"), &[a, c], Initializer::Ones, true)?;
            h = b.matmul(h, w)?;
            h = b.relu(h)?;
        }
        let loss = b.reduce_sum(h, &[], false)?;
        g.roles.loss = Some(loss);
        Autodiff.run(&mut g)?;
        AllReduceGradients { reduce: ReduceOp::Sum }.run(&mut g)?;
        Ok(g)
    }

    #[test]
    fn buckets_follow_gradient_order_and_caps() -> Result<()> {
        let mut g = mlp()?;
        AllReduceFusion { bucket_bytes: 8000, first_bucket_bytes: 500 }.run(&mut g)?;
        g.check()?;
        let b = buckets(&g);
        // The last layer's gradient is ready first (480 bytes, under the first cap); the
        // middle layer's fills bucket 0 past its cap and closes it; the first layer's opens
        // bucket 1.
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(b[0].bytes, 480 + 6400);
        let sizes: Vec<usize> = b[0]
            .tensors
            .iter()
            .map(|t| g.find(t.split(':').next().unwrap_or(t)).map(|id| g.node(id).outputs[0].bytes(1)).unwrap_or(0))
            .collect();
        assert_eq!(sizes, vec![480, 6400], "{b:?}");
        assert_eq!(b[1].bytes, 640);
        // Every gradient role now reads a bucket output.
        for (_, grad) in &g.roles.gradients {
            assert!(matches!(g.node(grad.node).op, Op::AllReduce(_)));
        }
        Ok(())
    }

    #[test]
    fn the_loss_rides_in_the_last_bucket_even_past_its_cap() -> Result<()> {
        let mut g = mlp()?;
        let local = g.roles.loss;
        AllReduceLoss { reduce: ReduceOp::Sum }.run(&mut g)?;
        // Caps that fill every bucket: without the loss, 480 | 6400 | 640 bytes.
        AllReduceFusion { bucket_bytes: 640, first_bucket_bytes: 480 }.run(&mut g)?;
        g.check()?;
        let b = buckets(&g);
        let sizes: Vec<usize> = b.iter().map(|b| b.bytes).collect();
        assert_eq!(sizes, vec![480, 6400, 640 + 4], "{b:?}");
        let last = &b[2];
        let loss = g.roles.loss.ok_or_else(|| crate::GraphError::invalid("test", "no loss"))?;
        assert_eq!(loss, Outlet::new(last.node, last.tensors.len() - 1), "the loss is the last bucket's last output");
        assert_eq!(g.node(last.node).inputs.last().copied(), local);
        Ok(())
    }

    #[test]
    fn a_loss_and_one_gradient_share_one_collective() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[4]))?;
        let w = b.variable("w", &[4, 3], Initializer::Ones, true)?;
        let y = b.matmul(x, w)?;
        let loss = b.reduce_mean(y, &[], false)?;
        g.roles.loss = Some(loss);
        Autodiff.run(&mut g)?;
        AllReduceGradients { reduce: ReduceOp::Sum }.run(&mut g)?;
        AllReduceLoss { reduce: ReduceOp::Sum }.run(&mut g)?;
        assert!(AllReduceFusion::default_sizes().run(&mut g)?);
        g.check()?;
        let b = buckets(&g);
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].bytes, 48 + 4);
        Ok(())
    }

    #[test]
    fn a_bucket_closes_after_the_tensor_that_reaches_its_cap() -> Result<()> {
        let mut g = mlp()?;
        AllReduceFusion { bucket_bytes: 1000, first_bucket_bytes: 1000 }.run(&mut g)?;
        let sizes: Vec<usize> = buckets(&g).iter().map(|b| b.bytes).collect();
        assert_eq!(sizes, vec![480 + 6400, 640]);
        // A tensor that reaches the cap on its own closes its bucket at once.
        let mut g = mlp()?;
        AllReduceFusion { bucket_bytes: 400, first_bucket_bytes: 400 }.run(&mut g)?;
        let sizes: Vec<usize> = buckets(&g).iter().map(|b| b.bytes).collect();
        assert_eq!(sizes, vec![480, 6400, 640]);
        Ok(())
    }
}
