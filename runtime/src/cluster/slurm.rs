//! A cluster from a Slurm job step (`srun`), as TensorFlow's `SlurmClusterResolver` builds
//! it: every task is a worker, worker `i` is the task whose `SLURM_PROCID` is `i` (so worker 0,
//! the chief, is proc 0), and the tasks of one node listen on consecutive ports from a
//! base port (8888 by default).
//!
//! Variables read: `SLURM_PROCID`, `SLURM_STEP_NUM_TASKS`, `SLURM_STEP_NODELIST` (a
//! compressed host list, `node[01-03,07]`), `SLURM_STEP_TASKS_PER_NODE` (`2(x3),1`), and
//! `SLURM_DISTRIBUTION` when set. A step is recognised by any `SLURM_STEP_*` variable; the
//! batch script of `sbatch`, which has `SLURM_PROCID` but no step, is a single process.
//!
//! Unlike TensorFlow, the nodes keep the order of `SLURM_STEP_NODELIST` instead of being
//! sorted by name: Slurm's block distribution gives the first node procs `0..n0`, the next
//! `n0..n0+n1`, and so on in that order, and a sorted list (`node10` before `node9`) would
//! give a proc an address on another machine.

use super::hostlist::{expand_hostlist, expand_tasks_per_node};
use super::spec::ClusterSpec;
use super::task::{TaskId, TaskType, parse_index};
use super::{Cluster, ClusterError, ClusterSource};

/// The first port of every node, TensorFlow's `SlurmClusterResolver` default.
pub const DEFAULT_SLURM_PORT_BASE: u16 = 8888;

const ORIGIN: ClusterSource = ClusterSource::Slurm;
const PROCID: &str = "SLURM_PROCID";
const NUM_TASKS: &str = "SLURM_STEP_NUM_TASKS";
const NODELIST: &str = "SLURM_STEP_NODELIST";
const TASKS_PER_NODE: &str = "SLURM_STEP_TASKS_PER_NODE";
const DISTRIBUTION: &str = "SLURM_DISTRIBUTION";

/// The cluster of the Slurm step this process runs in, or `None` outside a step. `env`
/// looks a variable up, so that tests need not touch the process environment.
pub fn from_slurm(env: &dyn Fn(&str) -> Option<String>, port_base: u16) -> Result<Option<Cluster>, ClusterError> {
    let Some(step_variable) = [NODELIST, NUM_TASKS, TASKS_PER_NODE].into_iter().find(|name| env(name).is_some()) else {
        return Ok(None);
    };
    let require = |name: &'static str| {
        env(name).ok_or_else(|| ClusterError::MissingVariable {
            origin: ORIGIN,
            name,
            because: format!("{step_variable} is, so this looks like a Slurm job step"),
        })
    };
    let (procid, num_tasks) = (require(PROCID)?, require(NUM_TASKS)?);
    let (nodelist, tasks_per_node) = (require(NODELIST)?, require(TASKS_PER_NODE)?);
    let procid = number(PROCID, &procid)?;
    let num_tasks = number(NUM_TASKS, &num_tasks)?;
    let nodes = expand_hostlist(nodelist.trim()).map_err(|reason| syntax(NODELIST, &nodelist, reason))?;
    let counts = expand_tasks_per_node(tasks_per_node.trim())
        .map_err(|reason| syntax(TASKS_PER_NODE, &tasks_per_node, reason))?;

    if nodes.len() != counts.len() {
        return inconsistent(format!(
            "{NODELIST}={nodelist} names {} nodes but {TASKS_PER_NODE}={tasks_per_node} gives task counts for {}",
            nodes.len(),
            counts.len()
        ));
    }
    let total: usize = counts.iter().sum();
    if total != num_tasks {
        return inconsistent(format!(
            "{TASKS_PER_NODE}={tasks_per_node} adds up to {total} tasks but {NUM_TASKS} is {num_tasks}"
        ));
    }
    check_block_distribution(env, &counts)?;

    let mut workers = Vec::with_capacity(total);
    for (node, &count) in nodes.iter().zip(&counts) {
        for offset in 0..count {
            let port = u16::try_from(usize::from(port_base) + offset).map_err(|_| ClusterError::Inconsistent {
                origin: ORIGIN,
                reason: format!("node {node} runs {count} tasks, so its ports from {port_base} would pass 65535"),
            })?;
            workers.push(format!("{node}:{port}"));
        }
    }
    let spec = ClusterSpec { worker: workers, ..ClusterSpec::default() };
    Cluster::new(spec, TaskId::new(TaskType::Worker, procid), ORIGIN, None).map(Some)
}

/// Proc ids follow the node list only under block distribution; under `cyclic` or `plane`
/// they alternate between nodes and the addresses would be wrong. When every node runs one
/// task all distributions coincide, so only then is another one accepted.
fn check_block_distribution(env: &dyn Fn(&str) -> Option<String>, counts: &[usize]) -> Result<(), ClusterError> {
    let Some(distribution) = env(DISTRIBUTION) else { return Ok(()) };
    let across_nodes = distribution.split([':', ',']).next().unwrap_or_default().trim();
    if matches!(across_nodes, "" | "*" | "block") || counts.iter().all(|&count| count <= 1) {
        return Ok(());
    }
    inconsistent(format!(
        "{DISTRIBUTION}={distribution}: tasks must be laid out by block (srun -m block) so that \
         consecutive proc ids share a node, as the cluster's addresses assume"
    ))
}

fn number(name: &'static str, value: &str) -> Result<usize, ClusterError> {
    parse_index(value.trim()).map_err(|reason| syntax(name, value, reason))
}

fn syntax(name: &str, value: &str, reason: String) -> ClusterError {
    ClusterError::Syntax { origin: ORIGIN, field: name.to_string(), value: value.to_string(), reason }
}

fn inconsistent<T>(reason: String) -> Result<T, ClusterError> {
    Err(ClusterError::Inconsistent { origin: ORIGIN, reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn step(procid: &str, num_tasks: &str, nodelist: &str, tasks_per_node: &str) -> BTreeMap<String, String> {
        [(PROCID, procid), (NUM_TASKS, num_tasks), (NODELIST, nodelist), (TASKS_PER_NODE, tasks_per_node)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn resolve(env: &BTreeMap<String, String>) -> Result<Option<Cluster>, ClusterError> {
        from_slurm(&|name| env.get(name).cloned(), DEFAULT_SLURM_PORT_BASE)
    }

    fn error(env: &BTreeMap<String, String>) -> String {
        resolve(env).unwrap_err().to_string()
    }

    #[test]
    fn no_step_means_no_cluster() {
        assert_eq!(resolve(&BTreeMap::new()), Ok(None));
        let batch_script: BTreeMap<String, String> =
            [("SLURM_PROCID", "0"), ("SLURM_JOB_NODELIST", "n[1-2]")].map(|(k, v)| (k.into(), v.into())).into();
        assert_eq!(resolve(&batch_script), Ok(None));
    }

    #[test]
    fn tasks_of_a_node_get_consecutive_ports_in_block_order() {
        let cluster = resolve(&step("3", "7", "node[01-03,07]", "2(x3),1")).unwrap().unwrap();
        assert_eq!(
            cluster.spec().worker,
            ["node01:8888", "node01:8889", "node02:8888", "node02:8889", "node03:8888", "node03:8889", "node07:8888",]
        );
        assert_eq!(cluster.task(), TaskId::new(TaskType::Worker, 3));
        assert_eq!(cluster.address(), Some("node02:8889"));
        assert_eq!((cluster.rank(), cluster.is_chief(), cluster.source()), (Some(3), false, ClusterSource::Slurm));
        assert_eq!(cluster.spec().chief, Vec::<String>::new());
    }

    #[test]
    fn proc_zero_is_the_chief() {
        let cluster = resolve(&step("0", "2", "a,b", "1(x2)")).unwrap().unwrap();
        assert_eq!(cluster.spec().worker, ["a:8888", "b:8888"]);
        assert!(cluster.is_chief());
        assert_eq!(cluster.rank(), Some(0));
    }

    #[test]
    fn the_node_list_order_is_kept_not_sorted() {
        let cluster = resolve(&step("1", "2", "node[9-10]", "1(x2)")).unwrap().unwrap();
        assert_eq!(cluster.address(), Some("node10:8888"));
    }

    #[test]
    fn the_base_port_can_be_chosen() {
        let env = step("1", "2", "n1", "2");
        let cluster = from_slurm(&|name| env.get(name).cloned(), 2222).unwrap().unwrap();
        assert_eq!(cluster.spec().worker, ["n1:2222", "n1:2223"]);
        assert_eq!(
            from_slurm(&|name| env.get(name).cloned(), 65535).unwrap_err().to_string(),
            "Slurm: node n1 runs 2 tasks, so its ports from 65535 would pass 65535"
        );
    }

    #[test]
    fn a_partial_step_names_the_missing_variable() {
        let mut env = step("0", "2", "a,b", "1(x2)");
        env.remove(PROCID);
        assert_eq!(
            error(&env),
            "Slurm: a variable is missing: SLURM_PROCID is not set although SLURM_STEP_NODELIST is, so this looks like a Slurm job step"
        );
        let only_tasks: BTreeMap<String, String> = [(NUM_TASKS.to_string(), "2".to_string())].into();
        assert_eq!(
            error(&only_tasks),
            "Slurm: a variable is missing: SLURM_PROCID is not set although SLURM_STEP_NUM_TASKS is, so this looks like a Slurm job step"
        );
    }

    #[test]
    fn malformed_variables_name_themselves() {
        assert_eq!(
            error(&step("x", "2", "a,b", "1(x2)")),
            "Slurm: SLURM_PROCID = 'x': the index 'x' is not a non-negative integer"
        );
        assert_eq!(
            error(&step("0", "2", "a[1-2", "1(x2)")),
            "Slurm: SLURM_STEP_NODELIST = 'a[1-2': '[' without a closing ']'"
        );
        assert_eq!(
            error(&step("0", "2", "a,b", "1(2)")),
            "Slurm: SLURM_STEP_TASKS_PER_NODE = '1(2)': '1(2)' has '1(2)' where a number should be"
        );
    }

    #[test]
    fn inconsistent_counts_are_refused() {
        assert_eq!(
            error(&step("0", "3", "a,b", "1(x3)")),
            "Slurm: SLURM_STEP_NODELIST=a,b names 2 nodes but SLURM_STEP_TASKS_PER_NODE=1(x3) gives task counts for 3"
        );
        assert_eq!(
            error(&step("0", "3", "a,b", "2,2")),
            "Slurm: SLURM_STEP_TASKS_PER_NODE=2,2 adds up to 4 tasks but SLURM_STEP_NUM_TASKS is 3"
        );
        assert_eq!(
            error(&step("4", "4", "a,b", "2(x2)")),
            "Slurm: task worker:4 is out of range: the cluster has 4 workers (worker:0, worker:1, worker:2, worker:3)"
        );
    }

    #[test]
    fn a_node_listed_twice_is_a_duplicate_address() {
        assert_eq!(
            error(&step("0", "2", "a,a", "1(x2)")),
            "Slurm: tasks worker:0 and worker:1 have the same address 'a:8888'"
        );
    }

    #[test]
    fn only_block_distribution_is_accepted_when_nodes_share_tasks() {
        let mut env = step("1", "4", "a,b", "2(x2)");
        for accepted in ["block", "block:cyclic", "*:block", "block,Pack"] {
            env.insert(DISTRIBUTION.into(), accepted.into());
            assert!(resolve(&env).is_ok(), "{accepted}");
        }
        env.insert(DISTRIBUTION.into(), "cyclic:block".into());
        assert_eq!(
            error(&env),
            "Slurm: SLURM_DISTRIBUTION=cyclic:block: tasks must be laid out by block (srun -m block) so that consecutive proc ids share a node, as the cluster's addresses assume"
        );
        let mut one_task_per_node = step("1", "2", "a,b", "1(x2)");
        one_task_per_node.insert(DISTRIBUTION.into(), "cyclic".into());
        assert!(resolve(&one_task_per_node).is_ok());
    }
}
