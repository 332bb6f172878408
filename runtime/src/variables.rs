//! The values of a graph's variables, living on the device between steps.

use crate::{Precision, Result, RuntimeError, Value};
use burn::backend::DispatchDevice;
use engine_graph::{Graph, HostTensor, Op, derive_seed};
use std::collections::BTreeMap;

/// Variable values by name. Names are the graph's node names (`dense/kernel`,
/// `dense/kernel/Adam`, `global_step`), which is also how checkpoints key them.
#[derive(Clone, Debug, Default)]
pub struct VariableStore {
    values: BTreeMap<String, Value>,
}

impl VariableStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates every variable of `graph` that is not in the store yet, from its initializer,
    /// seeded by `job_seed` and the variable's name (so every process and replica draws the
    /// same initial values).
    pub fn initialize(
        &mut self,
        graph: &Graph,
        job_seed: u64,
        device: &DispatchDevice,
        precision: Precision,
    ) -> Result<()> {
        for id in graph.variables() {
            let node = graph.node(id);
            if self.values.contains_key(&node.name) {
                continue;
            }
            let Op::Variable(var) = &node.op else { continue };
            let host = match &var.partition {
                // A shard: its rows of the whole variable's initial value.
                Some(p) => var
                    .init
                    .sample(var.dtype, &p.full_shape, derive_seed(job_seed, &p.of))?
                    .rows(p.offset, var.shape[0])?,
                None => var.init.sample(var.dtype, &var.shape, derive_seed(job_seed, &node.name))?,
            };
            self.values.insert(node.name.clone(), Value::from_host(&host, device, precision));
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    pub fn set(&mut self, name: &str, value: Value) {
        self.values.insert(name.to_string(), value);
    }

    pub fn contains(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every value as it is (on its device, at the job's precision): a copy that loses
    /// nothing, unlike [`Self::export`] (an elastic job carries it across a re-formation).
    pub fn values(&self) -> BTreeMap<String, Value> {
        self.values.clone()
    }

    /// Every value read back to the host (what a checkpoint saves).
    pub fn export(&self) -> Result<BTreeMap<String, HostTensor>> {
        self.values.iter().map(|(k, v)| Ok((k.clone(), v.to_host()?))).collect()
    }

    /// Loads values (from a checkpoint; a partitioned variable's shards from the whole
    /// variable), checking each against the graph's variable of the
    /// same name; names the graph does not have are ignored, as TensorFlow's restore of a
    /// subset does. Returns the names loaded.
    pub fn import(
        &mut self,
        graph: &Graph,
        values: &BTreeMap<String, HostTensor>,
        device: &DispatchDevice,
        precision: Precision,
    ) -> Result<Vec<String>> {
        let mut loaded = Vec::new();
        for id in graph.variables() {
            let node = graph.node(id);
            let Op::Variable(var) = &node.op else { continue };
            // A shard takes its rows of the whole variable when the values hold that.
            let sliced = match (&var.partition, values.contains_key(&node.name)) {
                (Some(p), false) => match values.get(&p.of) {
                    Some(whole) if whole.shape == p.full_shape => Some(whole.rows(p.offset, var.shape[0])?),
                    _ => None,
                },
                _ => None,
            };
            let Some(t) = values.get(&node.name).or(sliced.as_ref()) else { continue };
            if t.shape != var.shape || t.dtype() != var.dtype {
                return Err(RuntimeError::Variable {
                    name: node.name.clone(),
                    reason: format!(
                        "checkpoint holds {}{:?} but the graph expects {}{:?}",
                        t.dtype(),
                        t.shape,
                        var.dtype,
                        var.shape
                    ),
                });
            }
            self.values.insert(node.name.clone(), Value::from_host(t, device, precision));
            loaded.push(node.name.clone());
        }
        Ok(loaded)
    }
}

/// `values` with the shards of each partitioned variable of `graph` put back together
/// under the whole variable's name, as checkpoints hold them. Shards that are missing
/// leave their shards as they are.
pub fn whole_variables(
    graph: &Graph,
    mut values: BTreeMap<String, HostTensor>,
) -> Result<BTreeMap<String, HostTensor>> {
    let mut shards: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    for id in graph.variables() {
        let node = graph.node(id);
        if let Op::Variable(v) = &node.op
            && let Some(p) = &v.partition
        {
            shards.entry(p.of.clone()).or_default().push((p.offset, node.name.clone()));
        }
    }
    for (whole, mut parts) in shards {
        parts.sort();
        if !parts.iter().all(|(_, n)| values.contains_key(n)) {
            continue;
        }
        let tensors: Vec<HostTensor> = parts.iter().filter_map(|(_, n)| values.remove(n)).collect();
        let refs: Vec<&HostTensor> = tensors.iter().collect();
        values.insert(whole, HostTensor::concat_rows(&refs)?);
    }
    Ok(values)
}
