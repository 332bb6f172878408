//! Parameter servers: every variable (with its optimizer slots) lives on one `ps:k` task,
//! which also applies its updates; the workers compute gradients on their batches.

use crate::{Graph, GraphBuilder, NodeId, Op, Outlet, Placement, Result, passes::Pass, row_sparse::row_sparse};
use std::collections::{BTreeMap, BTreeSet};

/// The worker partition, run by every chief and worker task.
const WORKER: Placement = Placement::Worker;

/// TensorFlow's `replica_device_setter` as a pass, after the optimizer:
/// - variables go to the ps tasks round-robin in creation order (`global_step` on `ps:0`),
///   each optimizer slot (`w/Momentum`) with its variable;
/// - a ps task also runs what turns a gradient into its variables' new values (the
///   optimizer's update nodes, which read the variable and its slots) and the global step's
///   increment: updates are applied where the variables are, once per gradient received;
/// - a row-sparse gradient (an embedding's) is sent as its looked-up rows and indices and
///   added into the table's shape on the ps task;
/// - everything else runs on the worker: the forward and backward pass, the global norm
///   of gradient clipping (it needs every gradient), the learning rate schedule (from the
///   global step it read);
/// - a `Transfer` on every edge between partitions: the worker reads variables through
///   them and sends gradients (and the learning rate) through them. A value one ps task
///   needs from another goes through the worker, so ps tasks never talk to each other.
///
/// The train op becomes the worker's: it groups the values the worker sends. Each ps
/// task's assignments are grouped in a fetch `train_op/ps:k`, so they stay live.
pub struct ParameterServerPlacement {
    pub num_ps: usize,
}

impl ParameterServerPlacement {
    /// The ps task of every variable.
    fn assign_variables(&self, g: &Graph) -> BTreeMap<NodeId, usize> {
        let mut vars = g.variables();
        vars.sort();
        let names: BTreeMap<String, NodeId> = vars.iter().map(|&v| (g.node(v).name.clone(), v)).collect();
        // The variable a slot belongs to: the longest variable name it extends with `/`.
        let primary = |name: &str| -> Option<NodeId> {
            let mut cut = name.len();
            while let Some(at) = name[..cut].rfind('/') {
                if let Some(&v) = names.get(&name[..at]) {
                    return Some(v);
                }
                cut = at;
            }
            None
        };
        let mut placed = BTreeMap::new();
        let mut next = 0;
        for &v in &vars {
            let name = &g.node(v).name;
            if name == "global_step" {
                placed.insert(v, 0);
            } else if primary(name).is_none() {
                placed.insert(v, next % self.num_ps.max(1));
                next += 1;
            }
        }
        for &v in &vars {
            if !placed.contains_key(&v) {
                let mut root = v;
                while let Some(p) = primary(&g.node(root).name) {
                    root = p;
                }
                let k = placed.get(&root).copied().unwrap_or(0);
                placed.insert(v, k);
            }
        }
        placed
    }
}

impl Pass for ParameterServerPlacement {
    fn name(&self) -> &str {
        "parameter-server-placement"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let order = g.topological_order()?;
        let var_ps = self.assign_variables(g);
        let kinds = NodeKinds::of(g, &order);
        // The old train op is replaced below; it must not pull assignments to the worker.
        let old_train_op = g.roles.train_op.map(|o| o.node).filter(|&n| matches!(g.node(n).op, Op::Group(_)));
        let mut place = self.claim_updates(g, &order, &var_ps, &kinds);
        // What a role names is read by the worker (the learning rate for logs).
        let role_nodes: BTreeSet<NodeId> =
            g.roles.outlets().iter().map(|o| o.node).filter(|n| !kinds.sparse.contains(n)).collect();
        serve_only_variables(g, &order, &var_ps, old_train_op, &role_nodes, &mut place);
        co_locate_constants(g, &order, &kinds, &role_nodes, &mut place);
        let device_of = |id: NodeId| place.get(&id).map(|&k| Placement::Ps(k)).unwrap_or(WORKER);
        for &id in &order {
            g.set_placement(id, Some(device_of(id)));
        }
        // Assignments per ps task, for their groups.
        let mut assigns: BTreeMap<usize, Vec<Outlet>> = BTreeMap::new();
        for &id in &order {
            if matches!(g.node(id).op, Op::Assign(_))
                && let Some(&k) = place.get(&id)
            {
                assigns.entry(k).or_default().push(Outlet::from(id));
            }
        }
        if let Some(old) = old_train_op {
            g.roles.train_op = None;
            g.remove_node(old)?;
        }
        let sent = insert_transfers(g, &device_of)?;
        // The worker's step is done when everything it sends is computed.
        let mut b = GraphBuilder::new(g);
        let train_op = b.group("train_op", &sent)?;
        g.set_placement(train_op.node, Some(WORKER));
        g.roles.train_op = Some(train_op);
        for (k, outlets) in assigns {
            let mut b = GraphBuilder::new(g);
            let group = b.group(&format!("train_op_ps_{k}"), &outlets)?;
            g.set_placement(group.node, Some(Placement::Ps(k)));
            g.roles.fetches.insert(format!("train_op/{}", Placement::Ps(k)), group);
        }
        Ok(true)
    }
}

/// What kind of computation each node is, for placing it.
struct NodeKinds {
    /// Downstream of a placeholder: batch computation.
    batch: BTreeSet<NodeId>,
    /// Downstream of a gradient (or a non-optimizer update such as moving statistics):
    /// what the optimizer makes of it, committed where its variables live.
    update: BTreeSet<NodeId>,
    /// A row-sparse gradient is assembled where it is applied: the worker sends the
    /// looked-up rows and their indices, and the ps task adds them into the table's shape
    /// (and the mask of rows its sparse update is restricted to).
    sparse: BTreeSet<NodeId>,
    /// The gradients' checks, which stay on the worker so a NaN never leaves it.
    checks: BTreeSet<NodeId>,
}

impl NodeKinds {
    fn of(g: &Graph, order: &[NodeId]) -> Self {
        let mut batch: BTreeSet<NodeId> = BTreeSet::new();
        for &id in order {
            let n = g.node(id);
            if matches!(n.op, Op::Placeholder(_)) || n.inputs.iter().any(|o| batch.contains(&o.node)) {
                batch.insert(id);
            }
        }
        let grads: BTreeSet<Outlet> = g.roles.gradients.iter().chain(&g.roles.updates).map(|(_, o)| *o).collect();
        let sparse: BTreeSet<NodeId> = g
            .roles
            .gradients
            .iter()
            .filter(|(_, o)| row_sparse(g, *o).is_some())
            .map(|(_, o)| o.node)
            .chain(g.nodes().filter(|(_, n)| matches!(n.op, Op::RowsTouched(_))).map(|(id, _)| id))
            .collect();
        let mut update: BTreeSet<NodeId> = BTreeSet::new();
        for &id in order {
            if sparse.contains(&id) || g.node(id).inputs.iter().any(|o| grads.contains(o) || update.contains(&o.node)) {
                update.insert(id);
            }
        }
        let checks: BTreeSet<NodeId> = grads
            .iter()
            .flat_map(|o| g.outlet_consumers(*o))
            .map(|(c, _)| c)
            .filter(|&c| matches!(g.node(c).op, Op::CheckNumerics(_)))
            .collect();
        NodeKinds { batch, update, sparse, checks }
    }
}

impl ParameterServerPlacement {
    /// The variables' ps tasks, and for each ps task what lies between its variables and
    /// their assignments (not batch computation, except the updates): a node two ps tasks
    /// want is computed once, on the worker.
    fn claim_updates(
        &self,
        g: &Graph,
        order: &[NodeId],
        var_ps: &BTreeMap<NodeId, usize>,
        kinds: &NodeKinds,
    ) -> BTreeMap<NodeId, usize> {
        let mut place: BTreeMap<NodeId, usize> = var_ps.clone();
        for k in 0..self.num_ps {
            let mut below: BTreeSet<NodeId> = BTreeSet::new();
            for &id in order {
                let n = g.node(id);
                if var_ps.get(&id) == Some(&k) || n.inputs.iter().any(|o| below.contains(&o.node)) {
                    below.insert(id);
                }
            }
            let mut above: BTreeSet<NodeId> = BTreeSet::new();
            let mut stack: Vec<NodeId> = order
                .iter()
                .copied()
                .filter(|&id| {
                    matches!(g.node(id).op, Op::Assign(_)) && var_ps.get(&g.node(id).inputs[0].node) == Some(&k)
                })
                .collect();
            while let Some(id) = stack.pop() {
                if above.insert(id) {
                    stack.extend(g.node(id).inputs.iter().map(|o| o.node));
                }
            }
            for &id in order {
                let candidate = below.contains(&id)
                    && above.contains(&id)
                    && (!kinds.batch.contains(&id) || kinds.update.contains(&id))
                    && !var_ps.contains_key(&id)
                    && !kinds.checks.contains(&id);
                if candidate && place.insert(id, k).is_some() {
                    place.insert(id, usize::MAX);
                }
            }
        }
        place.retain(|_, k| *k != usize::MAX);
        place
    }
}

/// A computed value another partition reads is computed on the worker instead, so that
/// ps tasks serve only variables: until nothing moves.
fn serve_only_variables(
    g: &Graph,
    order: &[NodeId],
    var_ps: &BTreeMap<NodeId, usize>,
    old_train_op: Option<NodeId>,
    role_nodes: &BTreeSet<NodeId>,
    place: &mut BTreeMap<NodeId, usize>,
) {
    loop {
        let mut moved = false;
        for &id in order.iter().rev() {
            let Some(&k) = place.get(&id) else { continue };
            if var_ps.contains_key(&id) || Some(id) == old_train_op {
                continue;
            }
            let read_elsewhere = role_nodes.contains(&id)
                || g.consumers(id).iter().any(|(c, _, _)| Some(*c) != old_train_op && place.get(c) != Some(&k));
            if read_elsewhere {
                place.remove(&id);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
}

/// Constant expressions (no variable, no batch behind them) live with their consumers
/// when those are all on one ps task, so no transfer carries a constant.
fn co_locate_constants(
    g: &Graph,
    order: &[NodeId],
    kinds: &NodeKinds,
    role_nodes: &BTreeSet<NodeId>,
    place: &mut BTreeMap<NodeId, usize>,
) {
    let mut stateful: BTreeSet<NodeId> = BTreeSet::new();
    for &id in order {
        let n = g.node(id);
        if matches!(n.op, Op::Variable(_)) || n.inputs.iter().any(|o| stateful.contains(&o.node)) {
            stateful.insert(id);
        }
    }
    for &id in order.iter().rev() {
        if kinds.batch.contains(&id) || stateful.contains(&id) || role_nodes.contains(&id) {
            continue;
        }
        let homes: BTreeSet<Option<usize>> = g.consumers(id).iter().map(|(c, _, _)| place.get(c).copied()).collect();
        if let [Some(k)] = homes.into_iter().collect::<Vec<_>>()[..] {
            place.insert(id, k);
        }
    }
}

/// A transfer per crossing edge, one per source value and destination; ps to ps goes
/// through the worker. Returns what the worker sends the ps tasks.
fn insert_transfers(g: &mut Graph, device_of: &dyn Fn(NodeId) -> Placement) -> Result<Vec<Outlet>> {
    let mut transfers: BTreeMap<(Outlet, Placement), Outlet> = BTreeMap::new();
    let mut sent: Vec<Outlet> = Vec::new();
    let nodes: Vec<NodeId> = g.topological_order()?;
    for id in nodes {
        if matches!(g.node(id).op, Op::Transfer(_)) {
            continue;
        }
        let to = device_of(id);
        let inputs = g.node(id).inputs.clone();
        for (i, src) in inputs.iter().enumerate() {
            let from = device_of(src.node);
            if from == to {
                continue;
            }
            let via_worker =
                if from != WORKER && to != WORKER { transfer(g, &mut transfers, *src, WORKER)? } else { *src };
            let t = transfer(g, &mut transfers, via_worker, to)?;
            if to != WORKER && !sent.contains(&via_worker) {
                sent.push(via_worker);
            }
            g.set_input(id, i, t);
        }
    }
    Ok(sent)
}

/// The transfer of `src` to `to`, made once.
fn transfer(
    g: &mut Graph,
    made: &mut BTreeMap<(Outlet, Placement), Outlet>,
    src: Outlet,
    to: Placement,
) -> Result<Outlet> {
    if let Some(t) = made.get(&(src, to)) {
        return Ok(*t);
    }
    let src_name = g.node(src.node).name.clone();
    let mut b = GraphBuilder::new(g);
    let scope = format!("transfer_to_{}", to.to_string().replace(':', "_"));
    let t = b.with_scope(&scope, |b| {
        let name = b.name(&src_name);
        b.op_named(&name, crate::ops::Transfer { to }.into(), &[src])
    })?;
    g.set_placement(t.node, Some(to));
    made.insert((src, to), t);
    Ok(t)
}

/// Bytes a worker step moves each way: `(read from the ps tasks, sent to them)`, for a
/// batch of `batch` examples.
pub fn transfer_bytes(g: &Graph, batch: usize) -> Result<(usize, usize)> {
    let (mut read, mut sent) = (0, 0);
    for (_, n) in g.nodes() {
        if let Op::Transfer(t) = &n.op
            && let Some(src) = n.inputs.first()
        {
            let from = g.node(src.node).placement.unwrap_or(WORKER);
            let bytes = g.fact(*src)?.bytes(batch);
            match (from == WORKER, t.to == WORKER) {
                (false, true) => read += bytes,
                (true, false) => sent += bytes,
                _ => {}
            }
        }
    }
    Ok((read, sent))
}

#[cfg(test)]
mod tests;
