//! Whether a compiled plan fits in this machine's memory at a batch size: refused before the
//! first step rather than killed by the kernel's OOM killer in the middle of one.

use crate::{EstimatorError, Resources, Result};
use engine_graph::{Placement, Plan, human_bytes};

/// Refuses `plan` when its variables and peak live values for `batch` examples per replica
/// (every `replica` partition counted `local_replicas` times) would not fit, naming the
/// largest value and the node that makes it, which is usually the layer to shrink.
pub fn check_model_memory(plan: &Plan, batch: usize, local_replicas: usize, resources: &Resources) -> Result<()> {
    let stats = plan.stats(batch);
    let need: u64 = stats
        .per_device
        .iter()
        .map(|(device, (variables, activations))| {
            let copies = if *device == Some(Placement::Replica) { local_replicas.max(1) } else { 1 };
            (*variables as u64).saturating_add(*activations as u64).saturating_mul(copies as u64)
        })
        .fold(0u64, u64::saturating_add);
    let limit = resources.max_model_bytes();
    if need <= limit {
        return Ok(());
    }
    let largest = plan
        .graph
        .nodes()
        .flat_map(|(_, node)| node.outputs.iter().map(move |fact| (fact.bytes(batch), node)))
        .max_by_key(|(bytes, _)| *bytes);
    let culprit = match largest {
        Some((bytes, node)) => format!(
            "; the largest value is {} of `{}` ({}, {})",
            human_bytes(bytes),
            node.name,
            node.op.name(),
            node.outputs.first().map(|f| f.to_string()).unwrap_or_default()
        ),
        None => String::new(),
    };
    Err(EstimatorError::Resources(format!(
        "with a batch of {batch}{}, the model's variables and live values need about {}, more than the {} this \
         machine can give it{culprit}: use a smaller batch or a smaller layer",
        if local_replicas > 1 { format!(" on each of {local_replicas} replicas") } else { String::new() },
        human_bytes(need.min(usize::MAX as u64) as usize),
        human_bytes(limit.min(usize::MAX as u64) as usize)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_graph::{DType, Graph, GraphBuilder, Initializer, Shape};

    fn plan(units: usize) -> engine_graph::Result<Plan> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[1024]))?;
        let w = b.variable("dense/kernel", &[1024, units], Initializer::Zeros, true)?;
        let y = b.matmul(x, w)?;
        g.roles.fetches.insert("y".into(), y);
        Plan::new(g, vec![])
    }

    #[test]
    fn a_plan_that_does_not_fit_names_its_largest_value() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let small = Resources { memory_bytes: 1 << 30, cores: 2 };
        check_model_memory(&plan(64)?, 64, 1, &small)?;
        let err = check_model_memory(&plan(1 << 16)?, 4096, 1, &small).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("with a batch of 4096") && err.contains("`MatMul`"), "{err}");
        assert!(err.contains("1.0 GiB of `MatMul`") || err.contains("GiB of `"), "{err}");
        Ok(())
    }
}
