//! Groups gradient all-reduces into buckets (PyTorch DDP's reducer, as a graph pass).

use crate::{
    Graph, NodeId, Op, Outlet, Result,
    ops::{AllReduce, ReduceOp},
    passes::Pass,
};
use std::collections::BTreeMap;

/// Packs single-tensor all-reduces into buckets of at most `bucket_bytes` (a tensor larger
/// than that has a bucket of its own), the first bucket capped at `first_bucket_bytes` so
/// communication starts early. Tensors are taken in the order their gradients are
/// produced — the backward pass runs from the loss towards the inputs, so this is the
/// reverse of the forward order — which is deterministic and identical on every replica:
/// each replica launches bucket 0, 1, 2, ... in the same order, the condition for
/// collectives not to deadlock or mix up. A bucket can start as soon as its last
/// gradient exists, while the backward pass computes the rest.
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
            Op::AllReduce(a) => Some(Bucket {
                index: a.bucket,
                node: id,
                tensors: n
                    .inputs
                    .iter()
                    .map(|o| if o.output == 0 { g.node(o.node).name.clone() } else { format!("{}:{}", g.node(o.node).name, o.output) })
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
        // Single-tensor all-reduces, keyed by when their input becomes available.
        let mut singles: Vec<(usize, NodeId, ReduceOp)> = g
            .nodes()
            .filter_map(|(id, n)| match &n.op {
                Op::AllReduce(a) if n.inputs.len() == 1 => Some((position[&n.inputs[0].node], id, a.reduce)),
                _ => None,
            })
            .collect();
        if singles.len() < 2 {
            return Ok(false);
        }
        singles.sort();
        let mut groups: Vec<Vec<NodeId>> = Vec::new();
        let mut current: Vec<NodeId> = Vec::new();
        let mut bytes = 0usize;
        for &(_, id, reduce) in &singles {
            let size: usize = g.node(id).outputs.iter().map(|f| f.bytes(1)).sum();
            let cap = if groups.is_empty() { self.first_bucket_bytes } else { self.bucket_bytes };
            let same_op = current.first().is_none_or(|&c| matches!(&g.node(c).op, Op::AllReduce(a) if a.reduce == reduce));
            if !current.is_empty() && (bytes + size > cap || !same_op) {
                groups.push(std::mem::take(&mut current));
                bytes = 0;
            }
            current.push(id);
            bytes += size;
        }
        groups.push(current);
        for (index, group) in groups.iter().enumerate() {
            let reduce = match &g.node(group[0]).op {
                Op::AllReduce(a) => a.reduce,
                _ => ReduceOp::Sum,
            };
            let inputs: Vec<Outlet> = group.iter().map(|&id| g.node(id).inputs[0]).collect();
            let name = g.unique_name(&format!("allreduce/bucket_{index}"));
            let device = g.node(group[0]).device.clone();
            let fused = g.add_node(name, AllReduce { reduce, bucket: index }.into(), inputs)?;
            g.set_device(fused, device);
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
        passes::{Pass, strategy::AllReduceGradients},
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
        // The last layer's gradient is ready first: alone in the small first bucket; the
        // other two fit one bucket of 8000 bytes, middle layer first.
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(b[0].tensors.len(), 1);
        assert_eq!(b[0].bytes, 480);
        assert_eq!(b[1].bytes, 6400 + 640);
        let sizes: Vec<usize> = b[1].tensors.iter().map(|t| g.find(t.split(':').next().unwrap_or(t)).map(|id| g.node(id).outputs[0].bytes(1)).unwrap_or(0)).collect();
        assert_eq!(sizes, vec![6400, 640], "{b:?}");
        // Every gradient role now reads a bucket output.
        for (_, grad) in &g.roles.gradients {
            assert!(matches!(g.node(grad.node).op, Op::AllReduce(_)));
        }
        Ok(())
    }

    #[test]
    fn oversized_tensors_get_their_own_bucket() -> Result<()> {
        let mut g = mlp()?;
        AllReduceFusion { bucket_bytes: 1000, first_bucket_bytes: 1000 }.run(&mut g)?;
        let sizes: Vec<usize> = buckets(&g).iter().map(|b| b.bytes).collect();
        assert_eq!(sizes, vec![480, 6400, 640]);
        Ok(())
    }
}
