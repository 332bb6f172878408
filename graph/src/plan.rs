//! A compiled plan: the final graph, its schedule and the liveness of every value.

use crate::{
    Graph, NodeId, Op, Outlet, Result,
    passes::{Liveness, liveness, schedule},
};
use std::collections::BTreeMap;
use std::fmt::Write;

/// What the runtime executes. Built from a graph on which every rewriting pass has run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub graph: Graph,
    pub schedule: Vec<NodeId>,
    pub liveness: Liveness,
    /// Passes applied to get here, with whether each changed the graph.
    pub passes: Vec<(String, bool)>,
}

/// Estimates at one batch size.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanStats {
    pub nodes: usize,
    pub flops: u64,
    /// Bytes of variables (parameters, slots, step).
    pub variable_bytes: usize,
    /// Largest sum of live intermediate buffers along the schedule.
    pub peak_activation_bytes: usize,
    /// Bytes each replica all-reduces per step.
    pub all_reduce_bytes: usize,
    /// Per placement (`None`: unplaced): `(variable bytes, peak activation bytes)`.
    pub per_device: BTreeMap<Option<crate::Placement>, (usize, usize)>,
}

impl Plan {
    pub fn new(graph: Graph, passes: Vec<(String, bool)>) -> Result<Self> {
        graph.check()?;
        let schedule = schedule(&graph)?;
        let liveness = liveness(&graph, &schedule)?;
        Ok(Plan { graph, schedule, liveness, passes })
    }

    pub fn stats(&self, batch: usize) -> PlanStats {
        let mut stats = PlanStats { nodes: self.schedule.len(), ..Default::default() };
        let mut live = 0usize;
        let mut live_on: BTreeMap<Option<crate::Placement>, usize> = BTreeMap::new();
        let device_of = |id: NodeId| self.graph.node(id).placement;
        for (pos, &id) in self.schedule.iter().enumerate() {
            let node = self.graph.node(id);
            let inputs: Vec<_> = node.inputs.iter().filter_map(|o| self.graph.fact(*o).ok().cloned()).collect();
            stats.flops += node.op.def().flops(&inputs, &node.outputs, batch);
            let device = device_of(id);
            let entry = stats.per_device.entry(device).or_default();
            if let Op::Variable(_) = node.op {
                stats.variable_bytes += node.outputs[0].bytes(batch);
                entry.0 += node.outputs[0].bytes(batch);
                continue;
            }
            if let Op::AllReduce(_) = node.op {
                stats.all_reduce_bytes += inputs.iter().map(|f| f.bytes(batch)).sum::<usize>();
            }
            let produced: usize = node.outputs.iter().map(|f| f.bytes(batch)).sum();
            live += produced;
            let here = live_on.entry(device).or_default();
            *here += produced;
            entry.1 = entry.1.max(*here);
            stats.peak_activation_bytes = stats.peak_activation_bytes.max(live);
            for o in &self.liveness.free_after[pos] {
                if !matches!(self.graph.node(o.node).op, Op::Variable(_)) {
                    let bytes = self.graph.fact(*o).map(|f| f.bytes(batch)).unwrap_or(0);
                    live -= bytes;
                    if let Some(l) = live_on.get_mut(&device_of(o.node)) {
                        *l = l.saturating_sub(bytes);
                    }
                }
            }
        }
        stats
    }

    /// A human-readable listing: passes, schedule with facts and devices, statistics.
    pub fn describe(&self, batch: usize) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "passes: {}", self.passes.iter().map(|p| p.0.as_str()).collect::<Vec<_>>().join(" -> "));
        let _ = writeln!(s, "schedule ({} nodes):", self.schedule.len());
        for (pos, &id) in self.schedule.iter().enumerate() {
            let n = self.graph.node(id);
            let inputs: Vec<String> = n.inputs.iter().map(|o| self.outlet_name(*o)).collect();
            let outs: Vec<String> = n.outputs.iter().map(|f| f.to_string()).collect();
            let device = n.placement.map(|p| format!(" @{p}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  {pos:>4}  {:<48} {:<22} {:<28} <- {}{device}",
                n.name,
                n.op.name(),
                outs.join(", "),
                inputs.join(", ")
            );
        }
        let buckets = crate::passes::strategy::buckets(&self.graph);
        if !buckets.is_empty() {
            let _ = writeln!(s, "all-reduce buckets (launch order):");
            for b in &buckets {
                let _ = writeln!(
                    s,
                    "  bucket {:<3} {:>10}  {} tensors: {}",
                    b.index,
                    human_bytes(b.bytes),
                    b.tensors.len(),
                    b.tensors.join(", ")
                );
            }
        }
        let st = self.stats(batch);
        let _ = writeln!(s, "statistics at batch {batch} (per replica):");
        let _ = writeln!(s, "  flops per step         {:.3} M", st.flops as f64 / 1e6);
        let _ = writeln!(s, "  variables              {}", human_bytes(st.variable_bytes));
        let _ = writeln!(s, "  peak activations       {}", human_bytes(st.peak_activation_bytes));
        if st.all_reduce_bytes > 0 {
            let _ = writeln!(s, "  all-reduced per step   {}", human_bytes(st.all_reduce_bytes));
        }
        if st.per_device.len() > 1 || st.per_device.keys().any(Option::is_some) {
            for (placement, (vars, peak)) in &st.per_device {
                let device = placement.map(|p| p.to_string()).unwrap_or_else(|| "unplaced".into());
                let _ = writeln!(
                    s,
                    "  on {device:<18}  variables {:>10}, peak activations {:>10}",
                    human_bytes(*vars),
                    human_bytes(*peak)
                );
            }
        }
        s
    }

    fn outlet_name(&self, o: Outlet) -> String {
        let n = self.graph.node(o.node);
        if o.output == 0 { n.name.clone() } else { format!("{}:{}", n.name, o.output) }
    }
}

pub fn human_bytes(b: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.2} {}", UNITS[u]) }
}
