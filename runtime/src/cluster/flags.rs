//! A cluster given on the command line, for launches that set no environment (a script
//! that starts a few processes by hand, the end-to-end tests).
//!
//! Syntax:
//!
//! ```text
//! --cluster ROLE=ADDR[,ADDR…][;ROLE=ADDR[,ADDR…]…]   (may be repeated)
//! --task ROLE:INDEX                                  (or ROLE alone when the role has one task)
//! ```
//!
//! ROLE is `chief`, `worker`, `ps` or `evaluator`; ADDR is `host:port` (IPv6 hosts in
//! brackets, `[::1]:2222`); list order is index order. Roles can share one value, separated
//! by `;` (`--cluster "chief=h0:2222;worker=h1:2222,h2:2222"`), or come one per value
//! (`--cluster chief=h0:2222 --cluster worker=h1:2222,h2:2222`); each role at most once.
//! Spaces around separators are ignored, and an empty value counts as not given, so a
//! script can pass `--cluster "$CLUSTER"` with the variable unset.
//!
//! `;` rather than a space between roles so that the whole cluster is one shell word, and
//! `=` inside a role rather than `:` because `:` already separates host and port.

use super::error::{ClusterError, VALID_ROLES};
use super::spec::ClusterSpec;
use super::task::{TaskType, parse_index};
use super::validate::resolve_index;
use super::{Cluster, ClusterSource};

const ORIGIN: ClusterSource = ClusterSource::Flags;

/// The values of `--cluster` and `--task`, as the command line gave them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterFlags {
    pub cluster: Vec<String>,
    pub task: Option<String>,
}

impl ClusterFlags {
    /// Neither flag given (blank values count as not given).
    pub fn is_empty(&self) -> bool {
        self.cluster.iter().all(|value| value.trim().is_empty()) && self.task().is_none()
    }

    fn task(&self) -> Option<&str> {
        self.task.as_deref().map(str::trim).filter(|task| !task.is_empty())
    }
}

/// The cluster the flags describe, or `None` when neither flag is given.
pub fn from_flags(flags: &ClusterFlags) -> Result<Option<Cluster>, ClusterError> {
    if flags.is_empty() {
        return Ok(None);
    }
    let spec = parse_cluster_flag(&flags.cluster)?;
    let Some(task) = flags.task() else {
        return Err(ClusterError::MissingTask { origin: ORIGIN, hint: "add --task, e.g. --task worker:0" });
    };
    if spec.is_empty() {
        let hint = "add --cluster, e.g. --cluster \"chief=host0:2222;worker=host1:2222\"";
        return Err(ClusterError::TaskWithoutCluster { origin: ORIGIN, task: task.to_string(), hint });
    }
    let (task_type, index) = parse_task_flag(task)?;
    let task = resolve_index(&spec, task_type, index, ORIGIN)?;
    Cluster::new(spec, task, ORIGIN, None).map(Some)
}

/// All `--cluster` values merged into one spec. Addresses are only split here; they are
/// checked by the validator, with the name of the task they belong to.
pub fn parse_cluster_flag(values: &[String]) -> Result<ClusterSpec, ClusterError> {
    let mut spec = ClusterSpec::default();
    let mut given: Vec<(TaskType, &str)> = Vec::new();
    for value in values {
        for segment in value.split(';').map(str::trim).filter(|segment| !segment.is_empty()) {
            let syntax = |reason: String| ClusterError::Syntax {
                origin: ORIGIN,
                field: "--cluster".to_string(),
                value: value.clone(),
                reason,
            };
            let (role, addresses) = segment.split_once('=').ok_or_else(|| {
                syntax(format!("'{segment}' should be role=host:port[,host:port…], e.g. worker=host1:2222"))
            })?;
            let role = role.trim();
            let task_type = role.parse::<TaskType>().map_err(|_| ClusterError::UnknownRole {
                origin: ORIGIN,
                field: "--cluster".to_string(),
                role: role.to_string(),
                valid: VALID_ROLES.to_string(),
            })?;
            if let Some((_, first)) = given.iter().find(|(t, _)| *t == task_type) {
                let (first, second) = (first.to_string(), segment.to_string());
                return Err(ClusterError::DuplicateRole { origin: ORIGIN, role: task_type, first, second });
            }
            given.push((task_type, segment));
            let addresses: Vec<String> = addresses.split(',').map(|a| a.trim().to_string()).collect();
            if addresses.iter().any(String::is_empty) {
                return Err(syntax(format!("'{segment}' has an empty address (a stray or missing ',')")));
            }
            *spec.tasks_mut(task_type) = addresses;
        }
    }
    Ok(spec)
}

/// `worker:1`, or `chief` alone: the index is filled in by [`resolve_index`] once the
/// cluster is known.
fn parse_task_flag(text: &str) -> Result<(TaskType, Option<usize>), ClusterError> {
    let (role, index) = match text.split_once(':') {
        Some((role, index)) => (role.trim(), Some(index.trim())),
        None => (text, None),
    };
    let task_type = role.parse::<TaskType>().map_err(|_| ClusterError::UnknownRole {
        origin: ORIGIN,
        field: "--task".to_string(),
        role: role.to_string(),
        valid: VALID_ROLES.to_string(),
    })?;
    let index = index.map(parse_index).transpose().map_err(|reason| ClusterError::Syntax {
        origin: ORIGIN,
        field: "--task".into(),
        value: text.into(),
        reason,
    })?;
    Ok((task_type, index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::TaskId;

    fn flags(cluster: &[&str], task: Option<&str>) -> ClusterFlags {
        ClusterFlags { cluster: cluster.iter().map(|s| s.to_string()).collect(), task: task.map(str::to_string) }
    }

    fn error(cluster: &[&str], task: Option<&str>) -> String {
        from_flags(&flags(cluster, task)).unwrap_err().to_string()
    }

    #[test]
    fn no_flags_means_no_cluster() {
        assert_eq!(from_flags(&flags(&[], None)), Ok(None));
        assert_eq!(from_flags(&flags(&["", "  "], Some(" "))), Ok(None));
    }

    #[test]
    fn one_value_with_every_role() {
        let cluster = from_flags(&flags(
            &["chief=host0:2222; worker=host1:2222, host2:2222 ;ps=host3:2222;evaluator=host4:2222"],
            Some("worker:1"),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            cluster.spec().to_string(),
            "chief=host0:2222;worker=host1:2222,host2:2222;ps=host3:2222;evaluator=host4:2222"
        );
        assert_eq!(cluster.task(), TaskId::new(TaskType::Worker, 1));
        assert_eq!(cluster.source(), ClusterSource::Flags);
        assert_eq!(cluster.environment(), None);
        assert_eq!(cluster.rank(), Some(2));
    }

    #[test]
    fn one_value_per_role_is_the_same_cluster() {
        let split = from_flags(&flags(&["worker=h1:1,h2:1", "chief=h0:1;"], Some("chief:0"))).unwrap().unwrap();
        let joined = from_flags(&flags(&["chief=h0:1;worker=h1:1,h2:1"], Some("chief:0"))).unwrap().unwrap();
        assert_eq!(split, joined);
        assert!(split.is_chief());
    }

    #[test]
    fn the_printed_spec_parses_back() {
        let cluster = from_flags(&flags(&["chief=a:1;worker=b:1,c:1;ps=d:1"], Some("ps:0"))).unwrap().unwrap();
        assert_eq!(parse_cluster_flag(&[cluster.spec().to_string()]).as_ref(), Ok(cluster.spec()));
    }

    #[test]
    fn the_task_index_may_be_left_out_when_the_role_has_one_task() {
        let cluster = from_flags(&flags(&["chief=a:1;worker=b:1,c:1"], Some("chief"))).unwrap().unwrap();
        assert_eq!(cluster.task(), TaskId::new(TaskType::Chief, 0));
        assert_eq!(
            error(&["chief=a:1;worker=b:1,c:1"], Some("worker")),
            "--cluster/--task: the task's index is missing, and the cluster has 2 workers to choose from"
        );
    }

    #[test]
    fn a_cluster_without_a_task_and_a_task_without_a_cluster_are_refused() {
        assert_eq!(
            error(&["worker=a:1"], None),
            "--cluster/--task: the cluster is given but not this process's task; add --task, e.g. --task worker:0"
        );
        assert_eq!(
            error(&[], Some("worker:0")),
            "--cluster/--task: a task is given (worker:0) but no cluster; add --cluster, e.g. --cluster \"chief=host0:2222;worker=host1:2222\""
        );
    }

    #[test]
    fn syntax_errors_quote_the_value() {
        assert_eq!(
            error(&["worker:a:1"], Some("worker:0")),
            "--cluster/--task: --cluster = 'worker:a:1': 'worker:a:1' should be role=host:port[,host:port…], e.g. worker=host1:2222"
        );
        assert_eq!(
            error(&["worker=a:1,,b:1"], Some("worker:0")),
            "--cluster/--task: --cluster = 'worker=a:1,,b:1': 'worker=a:1,,b:1' has an empty address (a stray or missing ',')"
        );
        assert_eq!(
            error(&["worker="], Some("worker:0")),
            "--cluster/--task: --cluster = 'worker=': 'worker=' has an empty address (a stray or missing ',')"
        );
        assert_eq!(
            error(&["worker=a:1"], Some("worker:one")),
            "--cluster/--task: --task = 'worker:one': the index 'one' is not a non-negative integer"
        );
    }

    #[test]
    fn unknown_roles_list_the_valid_ones() {
        assert_eq!(
            error(&["workers=a:1"], Some("worker:0")),
            "--cluster/--task: unknown role 'workers' in --cluster; valid roles are chief, worker, ps, evaluator"
        );
        assert_eq!(
            error(&["worker=a:1"], Some("master:0")),
            "--cluster/--task: unknown role 'master' in --task; valid roles are chief, worker, ps, evaluator"
        );
    }

    #[test]
    fn a_role_given_twice_is_refused() {
        assert_eq!(
            error(&["worker=a:1", "worker=b:1"], Some("worker:0")),
            "--cluster/--task: the worker role is given twice (as 'worker=a:1' and as 'worker=b:1')"
        );
    }

    #[test]
    fn flags_go_through_the_validator() {
        assert_eq!(
            error(&["worker=a:1;chief=a:1"], Some("worker:0")),
            "--cluster/--task: tasks chief:0 and worker:0 have the same address 'a:1'"
        );
        assert_eq!(
            error(&["worker=a:1,b:70000"], Some("worker:0")),
            "--cluster/--task: task worker:1 has an invalid address 'b:70000': the port 70000 is outside 1..=65535"
        );
    }
}
