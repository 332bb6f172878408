//! What one ps task holds: its variables, and the executor of its partition of the plan
//! (the updates), run once per pushed gradient.

use crate::{Device, Exchange, Executor, Precision, Result, RunOptions, RuntimeError, Value, VariableStore};
use engine_graph::{HostTensor, Op, Outlet, Placement, Plan};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The result of one pushed update.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// Whether the new values were committed (every check saw finite values).
    pub applied: bool,
    /// The global step after the update, when this shard holds it.
    pub global_step: Option<i64>,
    /// What was not finite.
    pub non_finite: Vec<String>,
}

pub struct ParameterShard {
    index: usize,
    exec: Executor,
    exchange: Arc<Exchange>,
    /// The pushed values this partition expects, by the outlet its transfers read.
    inputs: Vec<Outlet>,
    state: Mutex<State>,
}

struct State {
    store: VariableStore,
    initialized: bool,
}

impl ParameterShard {
    /// The shard of ps task `index` for `plan` (placed by `ParameterServerPlacement`).
    pub fn new(plan: Arc<Plan>, index: usize, device: Device, precision: Precision) -> Result<Self> {
        let label = Placement::Ps(index);
        let g = &plan.graph;
        let mut inputs = Vec::new();
        for (_, n) in g.nodes() {
            if matches!(n.op, Op::Transfer(_)) && n.placement == Some(label) {
                inputs.extend(n.inputs.iter().copied());
            }
        }
        inputs.sort();
        inputs.dedup();
        // Pushed values are all there before the partition runs: a missing one is an
        // error at once, not a wait.
        let exchange = Arc::new(Exchange::new(Duration::ZERO));
        let exec = Executor::for_partition(plan.clone(), device, precision, label, exchange.clone())?;
        Ok(ParameterShard {
            index,
            exec,
            exchange,
            inputs,
            state: Mutex::new(State { store: VariableStore::new(), initialized: false }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `ps:k`.
    pub fn name(&self) -> String {
        Placement::Ps(self.index).to_string()
    }

    /// The variables this shard holds.
    pub fn variables(&self) -> Vec<String> {
        let g = &self.exec.plan().graph;
        let label = Placement::Ps(self.index);
        g.variables()
            .into_iter()
            .filter(|&v| g.node(v).placement == Some(label))
            .map(|v| g.node(v).name.clone())
            .collect()
    }

    pub fn is_initialized(&self) -> bool {
        self.lock().initialized
    }

    /// Takes the chief's values for this shard's variables, unless it already holds some
    /// (then they are newer than any checkpoint, and kept). Returns whether they were taken.
    pub fn initialize(&self, values: &BTreeMap<String, HostTensor>) -> Result<bool> {
        let mut state = self.lock();
        if state.initialized {
            return Ok(false);
        }
        // Only this shard's variables (the graph has every variable of the model).
        let mine: BTreeMap<String, HostTensor> =
            self.variables().into_iter().filter_map(|v| values.get(&v).map(|t| (v, t.clone()))).collect();
        let mut store = VariableStore::new();
        store.import(&self.exec.plan().graph, &mine, self.exec.device().dispatch(), self.exec.precision())?;
        if let Some(missing) = self.variables().into_iter().find(|v| !store.contains(v)) {
            return Err(RuntimeError::Variable {
                name: missing,
                reason: format!("the chief's initial values for {} do not include it", self.name()),
            });
        }
        state.store = store;
        state.initialized = true;
        Ok(true)
    }

    /// The current values of `names`.
    pub fn read(&self, names: &[String]) -> Result<Vec<HostTensor>> {
        let state = self.lock();
        self.ready(&state)?;
        names
            .iter()
            .map(|n| {
                state.store.get(n).map(Value::to_host).transpose()?.ok_or_else(|| RuntimeError::Variable {
                    name: n.clone(),
                    reason: format!("{} does not hold it", self.name()),
                })
            })
            .collect()
    }

    /// Every variable of this shard.
    pub fn export(&self) -> Result<BTreeMap<String, HostTensor>> {
        let state = self.lock();
        self.ready(&state)?;
        state.store.export()
    }

    /// The global step, when this shard holds it and is initialized.
    pub fn global_step(&self) -> Option<i64> {
        let state = self.lock();
        state.store.get("global_step").and_then(|v| v.to_host().ok()).and_then(|t| t.scalar_value()).map(|s| s as i64)
    }

    /// Applies one pushed update: every value this shard's partition receives, keyed by
    /// the outlet it is transferred from. Updates are applied one at a time.
    pub fn apply(&self, values: Vec<(Outlet, HostTensor)>, step: i64) -> Result<Applied> {
        let mut state = self.lock();
        self.ready(&state)?;
        if let Some(missing) = self.inputs.iter().find(|o| !values.iter().any(|(v, _)| v == *o)) {
            return Err(self.refuse(format!("a push lacks the value of {missing}")));
        }
        self.exchange.clear();
        let g = &self.exec.plan().graph;
        // Values sized by the batch (an embedding's looked-up rows) must all come from one
        // batch size; every other value has the variable's fixed shape.
        let batch =
            values.iter().find_map(|(o, t)| g.fact(*o).ok().and_then(|f| crate::shapes::batch_of(&f.shape, &t.shape)));
        for (outlet, tensor) in values {
            if !self.inputs.contains(&outlet) {
                return Err(self.refuse(format!("a push sends {outlet}, which this task does not receive")));
            }
            let fact = g.fact(outlet)?;
            if fact.dtype != tensor.dtype()
                || crate::shapes::resolve(&fact.shape, batch).as_deref() != Some(&tensor.shape[..])
            {
                return Err(RuntimeError::Variable {
                    name: g.node(outlet.node).name.clone(),
                    reason: format!("pushed as {}{:?}, expected {}", tensor.dtype(), tensor.shape, fact),
                });
            }
            self.exchange.send(outlet, Value::from_host(&tensor, self.exec.device().dispatch(), self.exec.precision()));
        }
        let options = RunOptions { step, replica: u64::MAX, profile: false };
        let out = self.exec.run(&mut state.store, &BTreeMap::new(), &[], options)?;
        let non_finite: Vec<String> = out.non_finite.iter().map(ToString::to_string).collect();
        drop(state);
        Ok(Applied { applied: non_finite.is_empty(), global_step: self.global_step(), non_finite })
    }

    fn refuse(&self, reason: String) -> RuntimeError {
        RuntimeError::ParameterServer { task: self.name(), reason, retryable: false }
    }

    fn ready(&self, state: &State) -> Result<()> {
        if state.initialized {
            Ok(())
        } else {
            Err(RuntimeError::ParameterServer {
                task: self.name(),
                reason: "not initialized yet: the chief initializes the ps tasks when it starts".into(),
                retryable: true,
            })
        }
    }
}
