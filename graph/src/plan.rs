//! A compiled plan: the final graph, its schedule and the liveness of every value.

use crate::{
    Graph, NodeId, Op, Outlet, Result,
    passes::{Liveness, liveness, schedule},
};
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
        for (pos, &id) in self.schedule.iter().enumerate() {
            let node = self.graph.node(id);
            let inputs: Vec<_> = node.inputs.iter().filter_map(|o| self.graph.fact(*o).ok().cloned()).collect();
            stats.flops += node.op.def().flops(&inputs, &node.outputs, batch);
            if let Op::Variable(_) = node.op {
                stats.variable_bytes += node.outputs[0].bytes(batch);
                continue;
            }
            live += node.outputs.iter().map(|f| f.bytes(batch)).sum::<usize>();
            stats.peak_activation_bytes = stats.peak_activation_bytes.max(live);
            for o in &self.liveness.free_after[pos] {
                if !matches!(self.graph.node(o.node).op, Op::Variable(_)) {
                    live -= self.graph.fact(*o).map(|f| f.bytes(batch)).unwrap_or(0);
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
            let device = n.device.as_deref().map(|d| format!(" @{d}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  {pos:>4}  {:<48} {:<22} {:<28} <- {}{device}",
                n.name,
                n.op.name(),
                outs.join(", "),
                inputs.join(", ")
            );
        }
        let st = self.stats(batch);
        let _ = writeln!(s, "statistics at batch {batch}:");
        let _ = writeln!(s, "  flops per step         {:.3} M", st.flops as f64 / 1e6);
        let _ = writeln!(s, "  variables              {}", human_bytes(st.variable_bytes));
        let _ = writeln!(s, "  peak activations       {}", human_bytes(st.peak_activation_bytes));
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
