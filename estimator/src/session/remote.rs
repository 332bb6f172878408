//! A parameter-server training task's side of a step: the variables its partition reads
//! are pulled from the ps tasks into the exchange before it runs, and the values it sends
//! (gradients, the learning rate) are pushed to them after, where they are applied.

use crate::{EstimatorError, Result};
use engine_graph::{HostTensor, Op, Outlet, Placement, Plan};
use engine_runtime::{
    Device, Exchange, Precision, Value, VariableStore,
    transport::ps::{ParameterClients, Pushed},
};
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) struct Remote {
    clients: Arc<ParameterClients>,
    pub exchange: Arc<Exchange>,
    /// Per ps task: the variables this task reads, and the outlet each arrives at.
    reads: Vec<Vec<(String, Outlet)>>,
    /// Per ps task: the outlets whose values this task sends.
    sends: Vec<Vec<Outlet>>,
    /// Per ps task: the variables it holds.
    holds: Vec<Vec<String>>,
    /// Starting values (initializers, a checkpoint): what the chief gives the ps tasks.
    pub local: VariableStore,
    is_chief: bool,
    /// The global step the ps tasks reported last.
    pub global_step: Option<u64>,
    /// The chief finished: training is over.
    pub finished: bool,
    /// A ps task was asked to stop: this task stops too (the chief saving its work).
    pub stopping: bool,
}

impl Remote {
    pub fn new(plan: &Plan, clients: Arc<ParameterClients>, is_chief: bool) -> Result<Self> {
        let g = &plan.graph;
        let n = clients.len();
        let (mut reads, mut sends, mut holds) = (vec![Vec::new(); n], vec![Vec::new(); n], vec![Vec::new(); n]);
        let ps_of = |placement: Option<Placement>| -> Result<usize> {
            let Some(Placement::Ps(k)) = placement else {
                return Err(EstimatorError::Other(format!(
                    "the plan places a node on {placement:?}, which is not a ps task"
                )));
            };
            if k >= n {
                return Err(EstimatorError::Config(format!(
                    "the plan places variables on ps:{k}, and the cluster has {n} ps task(s)"
                )));
            }
            Ok(k)
        };
        for (id, node) in g.nodes() {
            match &node.op {
                Op::Transfer(t) => {
                    let src = node.inputs[0];
                    if t.to == Placement::Worker {
                        let var = g.node(src.node);
                        reads[ps_of(var.placement)?].push((var.name.clone(), src));
                    } else {
                        sends[ps_of(Some(t.to))?].push(src);
                    }
                }
                Op::Variable(_) => holds[ps_of(node.placement)?].push(g.node(id).name.clone()),
                _ => {}
            }
        }
        for list in &mut sends {
            list.sort();
            list.dedup();
        }
        Ok(Remote {
            clients,
            exchange: Arc::new(Exchange::new(std::time::Duration::ZERO)),
            reads,
            sends,
            holds,
            local: VariableStore::new(),
            is_chief,
            global_step: None,
            finished: false,
            stopping: false,
        })
    }

    /// Starts training from one state: the chief gives the ps tasks its starting values
    /// (kept by ps tasks that already hold newer ones: a restarted chief joins the training
    /// that goes on); the other tasks wait until the ps tasks are initialized. Either way
    /// the global step is the ps tasks'.
    pub fn start(&mut self) -> Result<()> {
        let step = if self.is_chief {
            let values = self.local.export()?;
            let per_ps: Vec<BTreeMap<String, HostTensor>> = self
                .holds
                .iter()
                .map(|names| names.iter().filter_map(|n| values.get(n).map(|v| (n.clone(), v.clone()))).collect())
                .collect();
            let (accepted, step) = self.clients.initialize(per_ps)?;
            if !accepted {
                log::info!(
                    "The ps tasks already hold the variables (training went on without this task); continuing from them"
                );
            }
            step
        } else {
            log::info!("Waiting for the chief to initialize the ps tasks");
            self.clients.wait_initialized()?
        };
        self.global_step = step.map(|s| s.max(0) as u64);
        Ok(())
    }

    /// Pulls this step's variables into the exchange, on `device`, with `extra` ones the
    /// step fetches (by name and outlet).
    pub fn pull(&self, device: &Device, precision: Precision, extra: &[(String, Outlet)]) -> Result<()> {
        self.exchange.clear();
        let mut reads = self.reads.clone();
        for (name, outlet) in extra {
            let k = self
                .holds
                .iter()
                .position(|h| h.contains(name))
                .ok_or_else(|| EstimatorError::Other(format!("no ps task holds '{name}'")))?;
            if !reads[k].iter().any(|(n, _)| n == name) {
                reads[k].push((name.clone(), *outlet));
            }
        }
        let names: Vec<Vec<String>> = reads.iter().map(|r| r.iter().map(|(n, _)| n.clone()).collect()).collect();
        let values = self.clients.pull(&names)?;
        for (reads, values) in reads.iter().zip(values) {
            if values.len() != reads.len() {
                return Err(EstimatorError::Other(format!(
                    "{} values pulled for {} variables",
                    values.len(),
                    reads.len()
                )));
            }
            for ((_, outlet), value) in reads.iter().zip(values) {
                self.exchange.send(*outlet, Value::from_host(&value, device.dispatch(), precision));
            }
        }
        Ok(())
    }

    /// Pushes what the step sent to each ps task, where it is applied.
    pub fn push(&mut self, step: i64) -> Result<Pushed> {
        let mut per_ps = Vec::with_capacity(self.sends.len());
        for outlets in &self.sends {
            let mut values = Vec::with_capacity(outlets.len());
            for &o in outlets {
                let v = self.exchange.get(o).ok_or_else(|| {
                    EstimatorError::Other(format!("the step did not compute {o}, which a ps task needs"))
                })?;
                values.push((o, v.to_host()?));
            }
            per_ps.push(values);
        }
        let pushed = self.clients.push(step, per_ps)?;
        if let Some(s) = pushed.global_step {
            self.global_step = Some(s.max(0) as u64);
        }
        self.finished |= pushed.finished;
        self.stopping |= pushed.stopping;
        Ok(pushed)
    }

    /// Every variable, partitioned ones whole (as checkpoints hold them).
    pub fn export(&self, graph: &engine_graph::Graph) -> Result<BTreeMap<String, HostTensor>> {
        Ok(engine_runtime::whole_variables(graph, self.clients.export()?)?)
    }

    pub fn done(&self) {
        self.clients.done();
    }
}
