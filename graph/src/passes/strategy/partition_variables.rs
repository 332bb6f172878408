//! Variable partitioning: a large variable becomes row shards, so that parameter-server
//! placement can spread one layer's weights (and their updates) over several ps tasks.

use crate::{Graph, GraphBuilder, NodeId, Op, Outlet, Result, ops::Partition, passes::Pass};

/// How many shards a variable gets, as TensorFlow's partitioners decide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioner {
    /// `tf.distribute.experimental.partitioners.MinSizePartitioner`: as many shards as keep
    /// each at least `min_shard_bytes`, at most `max_shards`.
    MinSize { min_shard_bytes: usize, max_shards: usize },
    /// `FixedShardsPartitioner`: `shards` shards (fewer when the variable has fewer rows).
    FixedShards(usize),
}

impl Partitioner {
    /// Shards for a variable of `bytes` bytes and `rows` rows (1: not partitioned).
    pub fn shards(&self, bytes: usize, rows: usize) -> usize {
        let n = match *self {
            Partitioner::MinSize { min_shard_bytes, max_shards } => {
                (bytes / min_shard_bytes.max(1)).clamp(1, max_shards.max(1))
            }
            Partitioner::FixedShards(n) => n.max(1),
        };
        n.min(rows.max(1))
    }
}

/// Rows of each shard when `rows` are split `n` ways: as even as possible, the larger
/// shards first (TensorFlow's split).
pub fn shard_rows(rows: usize, n: usize) -> Vec<usize> {
    let n = n.max(1);
    (0..n).map(|i| rows / n + usize::from(i < rows % n)).collect()
}

/// Runs before autodiff. Replaces each trainable variable the partitioner splits by its
/// row shards `<name>/part_<i>` and a `Concat` of them that every former reader reads:
/// autodiff then gives each shard its own gradient (a slice), the optimizer its own slots
/// and update, and placement puts consecutive shards on consecutive ps tasks. Shards
/// remember what they are a part of: they are initialized as slices of the whole
/// variable's initial value (the same values an unpartitioned run starts from), and
/// checkpoints hold the whole variable.
pub struct PartitionVariables {
    pub partitioner: Partitioner,
}

impl Pass for PartitionVariables {
    fn name(&self) -> &str {
        "partition-variables"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        let vars: Vec<NodeId> = g.trainable_variables();
        for id in vars {
            let node = g.node(id);
            let Op::Variable(var) = node.op.clone() else { continue };
            if var.partition.is_some() || var.shape.is_empty() {
                continue;
            }
            let rows = var.shape[0];
            let bytes = var.shape.iter().product::<usize>() * var.dtype.size_bytes();
            let n = self.partitioner.shards(bytes, rows);
            if n < 2 {
                continue;
            }
            let name = node.name.clone();
            let mut parts = Vec::with_capacity(n);
            let mut offset = 0;
            for (i, r) in shard_rows(rows, n).into_iter().enumerate() {
                let mut shape = var.shape.clone();
                shape[0] = r;
                let partition = Partition { of: name.clone(), full_shape: var.shape.clone(), offset };
                let op = crate::ops::Variable { shape, partition: Some(partition), ..var.clone() };
                let part = GraphBuilder::new(g).op_named(&format!("{name}/part_{i}"), op.into(), &[])?;
                g.set_placement(part.node, g.node(id).placement);
                parts.push(part);
                offset += r;
            }
            let whole = GraphBuilder::new(g).with_scope(&name, |b| b.concat(&parts, 0))?;
            g.set_placement(whole.node, g.node(id).placement);
            g.replace_uses(Outlet::from(id), whole)?;
            g.remove_node(id)?;
            changed = true;
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Initializer, Shape, autodiff::Autodiff};

    #[test]
    fn shard_counts_follow_tensorflows_partitioners() {
        let min = Partitioner::MinSize { min_shard_bytes: 256 << 10, max_shards: 3 };
        assert_eq!(min.shards(100 << 10, 1000), 1, "under the minimum: whole");
        assert_eq!(min.shards(600 << 10, 1000), 2);
        assert_eq!(min.shards(10 << 20, 1000), 3, "at most max_shards");
        assert_eq!(min.shards(10 << 20, 2), 2, "never more shards than rows");
        assert_eq!(Partitioner::FixedShards(4).shards(16, 10), 4);
        assert_eq!(shard_rows(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(shard_rows(5408, 2), vec![2704, 2704]);
    }

    #[test]
    fn a_large_variable_becomes_shards_that_each_get_a_gradient() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[5]))?;
        let w = b.variable("dense/kernel", &[5, 2], Initializer::GlorotUniform, true)?;
        let bias = b.variable("dense/bias", &[2], Initializer::Zeros, true)?;
        let y = b.matmul(x, w)?;
        let y = b.add(y, bias)?;
        let loss = b.reduce_mean(y, &[], false)?;
        g.roles.loss = Some(loss);
        g.roles.inputs.insert("x".into(), x);
        let pass = PartitionVariables { partitioner: Partitioner::FixedShards(2) };
        assert!(pass.run(&mut g)?);
        Autodiff.run(&mut g)?;
        g.check()?;
        assert!(g.find("dense/kernel").is_err(), "the whole variable is gone");
        let part = |i: usize| -> Result<Partition> {
            match &g.node(g.find(&format!("dense/kernel/part_{i}"))?).op {
                Op::Variable(v) => {
                    Ok(v.partition.clone().ok_or_else(|| crate::GraphError::invalid("test", "no partition"))?)
                }
                _ => Err(crate::GraphError::invalid("test", "not a variable")),
            }
        };
        assert_eq!(part(0)?, Partition { of: "dense/kernel".into(), full_shape: vec![5, 2], offset: 0 });
        assert_eq!(part(1)?.offset, 3);
        // Both shards of the kernel get a gradient of their own shape; the bias (2 rows of
        // 4 bytes, one shard each at most) is split too, by the fixed count.
        let grads: Vec<(String, String)> = g
            .roles
            .gradients
            .iter()
            .map(|(v, o)| Ok((g.node(*v).name.clone(), g.fact(*o)?.to_string())))
            .collect::<Result<_>>()?;
        assert!(grads.contains(&("dense/kernel/part_0".into(), "f32[3, 2]".into())), "{grads:?}");
        assert!(grads.contains(&("dense/kernel/part_1".into(), "f32[2, 2]".into())), "{grads:?}");
        Ok(())
    }
}
