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
            let host = var.init.sample(var.dtype, &var.shape, derive_seed(job_seed, &node.name))?;
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

    /// Every value read back to the host (what a checkpoint saves).
    pub fn export(&self) -> Result<BTreeMap<String, HostTensor>> {
        self.values.iter().map(|(k, v)| Ok((k.clone(), v.to_host()?))).collect()
    }

    /// Loads values (from a checkpoint), checking each against the graph's variable of the
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
            let Some(t) = values.get(&node.name) else { continue };
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
