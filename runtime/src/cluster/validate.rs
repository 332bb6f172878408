//! The one validator every source goes through, so that a cluster means the same thing and
//! fails with the same words whether it came from flags, `TF_CONFIG`, torchrun or Slurm.

use super::ClusterSource;
use super::error::{ClusterError, count_tasks, list_tasks};
use super::spec::ClusterSpec;
use super::task::{TaskId, TaskType};
use std::collections::HashMap;

/// Checks the cluster and this process's task, and rewrites every address to its canonical
/// `host:port` (surrounding spaces and leading zeros of the port removed) so that later
/// comparisons and connections see one spelling.
pub(crate) fn validate(spec: &mut ClusterSpec, task: &TaskId, origin: ClusterSource) -> Result<(), ClusterError> {
    canonicalize_addresses(spec, origin)?;
    for task_type in [TaskType::Chief, TaskType::Evaluator] {
        if spec.tasks(task_type).len() > 1 {
            return Err(ClusterError::TooManyTasks { origin, task_type, addresses: spec.tasks(task_type).to_vec() });
        }
    }
    if spec.collective_group_size() == 0 {
        let others = TaskType::ALL.into_iter().filter(|&t| !spec.tasks(t).is_empty()).collect();
        return Err(ClusterError::EmptyCluster { origin, others });
    }
    check_duplicate_addresses(spec, origin)?;
    check_task(spec, task, origin)
}

/// The task a source named, with the index filled in when it can only be one: `--task chief`
/// or a `TF_CONFIG` task without `"index"` is unambiguous when the role has one task, and
/// refused otherwise rather than silently taken as index 0 (a second worker:0 would be a
/// second chief).
pub(crate) fn resolve_index(
    spec: &ClusterSpec,
    task_type: TaskType,
    index: Option<usize>,
    origin: ClusterSource,
) -> Result<TaskId, ClusterError> {
    match index {
        Some(index) => Ok(TaskId::new(task_type, index)),
        None => match spec.tasks(task_type).len() {
            0 | 1 => Ok(TaskId::new(task_type, 0)),
            count => Err(ClusterError::MissingTaskIndex { origin, task_type, count }),
        },
    }
}

/// `host:port`, with the host a name, an IPv4 address or a bracketed IPv6 address.
/// Returns the canonical spelling, or why the text is not an address.
pub(crate) fn parse_address(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the address is empty".to_string());
    }
    if let Some((scheme, _)) = text.split_once("://") {
        return Err(format!("give host:port without the scheme '{scheme}://'"));
    }
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (host, rest) = bracketed.split_once(']').ok_or("'[' without a closing ']'")?;
        let port = rest.strip_prefix(':').ok_or("expected ':port' after the bracketed IPv6 host")?;
        (format!("[{}]", host.trim()), port)
    } else {
        let (host, port) = text.rsplit_once(':').ok_or("expected host:port, e.g. localhost:2222")?;
        let host = host.trim();
        if host.contains(':') {
            return Err("an IPv6 host must be written in brackets, e.g. [::1]:2222".to_string());
        }
        if let Some(bad) = host.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))) {
            return Err(format!("the host '{host}' contains '{bad}' (give host:port, without a scheme or path)"));
        }
        (host.to_string(), port)
    };
    if host.is_empty() || host == "[]" {
        return Err("the host is empty".to_string());
    }
    Ok(format!("{host}:{}", parse_port(port.trim())?))
}

fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() {
        return Err("the port is empty".to_string());
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("the port '{text}' is not a number"));
    }
    match text.parse::<u32>() {
        Ok(port @ 1..=65535) => Ok(port as u16),
        _ => Err(format!("the port {text} is outside 1..=65535")),
    }
}

fn canonicalize_addresses(spec: &mut ClusterSpec, origin: ClusterSource) -> Result<(), ClusterError> {
    for task_type in TaskType::ALL {
        for (index, address) in spec.tasks_mut(task_type).iter_mut().enumerate() {
            match parse_address(address) {
                Ok(canonical) => *address = canonical,
                Err(reason) => {
                    let task = TaskId::new(task_type, index);
                    return Err(ClusterError::InvalidAddress { origin, task, address: address.clone(), reason });
                }
            }
        }
    }
    Ok(())
}

/// Host names are case-insensitive, so `Node1:2222` and `node1:2222` are one address. Two
/// different names for one machine (`localhost`, `127.0.0.1`) are not detected: that would
/// need name resolution, which belongs to connecting, not to parsing.
fn check_duplicate_addresses(spec: &ClusterSpec, origin: ClusterSource) -> Result<(), ClusterError> {
    let mut seen: HashMap<String, TaskId> = HashMap::new();
    for task in spec.task_ids() {
        let Some(address) = spec.address(&task) else { continue };
        if let Some(&first) = seen.get(&address.to_ascii_lowercase()) {
            return Err(ClusterError::DuplicateAddress { origin, address: address.to_string(), first, second: task });
        }
        seen.insert(address.to_ascii_lowercase(), task);
    }
    Ok(())
}

/// An evaluator may be left out of the cluster: TensorFlow's `train_and_evaluate` documents
/// its `TF_CONFIG` with the training cluster only, since no task ever connects to it.
fn check_task(spec: &ClusterSpec, task: &TaskId, origin: ClusterSource) -> Result<(), ClusterError> {
    let count = spec.tasks(task.task_type).len();
    if count == 0 {
        if task.task_type == TaskType::Evaluator {
            if task.index == 0 {
                return Ok(());
            }
            let available = "no evaluators, and an evaluator outside the cluster must be evaluator:0".to_string();
            return Err(ClusterError::IndexOutOfRange { origin, task: *task, available });
        }
        let present: Vec<&str> =
            TaskType::ALL.into_iter().filter(|&t| !spec.tasks(t).is_empty()).map(TaskType::as_str).collect();
        return Err(ClusterError::TaskNotInCluster { origin, task: *task, present: present.join(", ") });
    }
    if task.index >= count {
        let available = format!("{} ({})", count_tasks(task.task_type, count), list_tasks(task.task_type, count));
        return Err(ClusterError::IndexOutOfRange { origin, task: *task, available });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: ClusterSource = ClusterSource::TfConfig;

    fn spec(chief: &[&str], worker: &[&str], ps: &[&str], evaluator: &[&str]) -> ClusterSpec {
        let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        ClusterSpec { chief: strings(chief), worker: strings(worker), ps: strings(ps), evaluator: strings(evaluator) }
    }

    fn check(mut cluster: ClusterSpec, task: &str) -> Result<ClusterSpec, String> {
        let task: TaskId = task.parse().expect("test tasks are well formed");
        validate(&mut cluster, &task, ORIGIN).map_err(|e| e.to_string())?;
        Ok(cluster)
    }

    #[test]
    fn a_valid_cluster_passes_and_is_canonicalized() {
        let cluster = check(spec(&["c:1"], &[" w:2", "W:03 ", "[::1]:4"], &["p : 5"], &[]), "worker:2").unwrap();
        assert_eq!(cluster.worker, ["w:2", "W:3", "[::1]:4"]);
        assert_eq!(cluster.ps, ["p:5"]);
    }

    #[test]
    fn index_out_of_range_lists_the_tasks() {
        assert_eq!(
            check(spec(&[], &["a:1", "b:1"], &[], &[]), "worker:3").unwrap_err(),
            "TF_CONFIG: task worker:3 is out of range: the cluster has 2 workers (worker:0, worker:1)"
        );
    }

    #[test]
    fn index_out_of_range_in_a_big_cluster_is_shortened() {
        let workers: Vec<String> = (1..=8).map(|port| format!("h:{port}")).collect();
        let workers: Vec<&str> = workers.iter().map(String::as_str).collect();
        assert_eq!(
            check(spec(&[], &workers, &[], &[]), "worker:8").unwrap_err(),
            "TF_CONFIG: task worker:8 is out of range: the cluster has 8 workers (worker:0, worker:1, worker:2, …, worker:7)"
        );
    }

    #[test]
    fn task_type_absent_from_the_cluster() {
        assert_eq!(
            check(spec(&["c:1"], &["a:1"], &[], &[]), "ps:0").unwrap_err(),
            "TF_CONFIG: task ps:0 is not in the cluster: it has no ps tasks (it has chief, worker)"
        );
    }

    #[test]
    fn an_evaluator_may_stay_outside_the_cluster_as_evaluator_0_only() {
        assert!(check(spec(&["c:1"], &["a:1"], &[], &[]), "evaluator:0").is_ok());
        assert_eq!(
            check(spec(&["c:1"], &["a:1"], &[], &[]), "evaluator:1").unwrap_err(),
            "TF_CONFIG: task evaluator:1 is out of range: the cluster has no evaluators, and an evaluator outside the cluster must be evaluator:0"
        );
    }

    #[test]
    fn at_most_one_chief() {
        assert_eq!(
            check(spec(&["c:1", "c:2"], &["a:1"], &[], &[]), "worker:0").unwrap_err(),
            "TF_CONFIG: the cluster has 2 chiefs (c:1, c:2); at most one is allowed"
        );
    }

    #[test]
    fn at_most_one_evaluator() {
        assert_eq!(
            check(spec(&[], &["a:1"], &[], &["e:1", "e:2"]), "worker:0").unwrap_err(),
            "TF_CONFIG: the cluster has 2 evaluators (e:1, e:2); at most one is allowed"
        );
    }

    #[test]
    fn an_empty_cluster_is_refused() {
        assert_eq!(
            check(spec(&[], &[], &[], &[]), "worker:0").unwrap_err(),
            "TF_CONFIG: the cluster has no chief and no workers, so no task would train"
        );
        assert_eq!(
            check(spec(&[], &[], &["p:1"], &["e:1"]), "ps:0").unwrap_err(),
            "TF_CONFIG: the cluster has no chief and no workers, so no task would train (it has only ps, evaluator)"
        );
    }

    #[test]
    fn duplicate_addresses_name_both_tasks() {
        assert_eq!(
            check(spec(&["h:1"], &["h:2", "H:1"], &[], &[]), "worker:0").unwrap_err(),
            "TF_CONFIG: tasks chief:0 and worker:1 have the same address 'H:1'"
        );
    }

    #[test]
    fn invalid_addresses_name_the_task() {
        let cases = [
            ("h", "expected host:port, e.g. localhost:2222"),
            ("h:", "the port is empty"),
            (":1", "the host is empty"),
            ("h:port", "the port 'port' is not a number"),
            ("h:0", "the port 0 is outside 1..=65535"),
            ("h:65536", "the port 65536 is outside 1..=65535"),
            ("h:99999999999", "the port 99999999999 is outside 1..=65535"),
            ("h:-1", "the port '-1' is not a number"),
            ("::1:2", "an IPv6 host must be written in brackets, e.g. [::1]:2222"),
            ("[::1:2", "'[' without a closing ']'"),
            ("[::1]2", "expected ':port' after the bracketed IPv6 host"),
            ("grpc://h:1", "give host:port without the scheme 'grpc://'"),
            ("h/x:1", "the host 'h/x' contains '/' (give host:port, without a scheme or path)"),
            ("my host:1", "the host 'my host' contains ' ' (give host:port, without a scheme or path)"),
            ("", "the address is empty"),
        ];
        for (address, reason) in cases {
            assert_eq!(
                check(spec(&[], &["ok:1", address], &[], &[]), "worker:0").unwrap_err(),
                format!("TF_CONFIG: task worker:1 has an invalid address '{address}': {reason}"),
                "for {address:?}"
            );
        }
    }

    #[test]
    fn the_port_bounds_are_accepted() {
        assert!(check(spec(&[], &["h:1", "h:65535"], &[], &[]), "worker:0").is_ok());
    }

    #[test]
    fn a_missing_index_is_inferred_only_when_unambiguous() {
        let cluster = spec(&["c:1"], &["a:1", "b:1"], &[], &[]);
        assert_eq!(resolve_index(&cluster, TaskType::Chief, None, ORIGIN), Ok(TaskId::new(TaskType::Chief, 0)));
        assert_eq!(resolve_index(&cluster, TaskType::Worker, Some(1), ORIGIN), Ok(TaskId::new(TaskType::Worker, 1)));
        assert_eq!(
            resolve_index(&cluster, TaskType::Worker, None, ORIGIN).unwrap_err().to_string(),
            "TF_CONFIG: the task's index is missing, and the cluster has 2 workers to choose from"
        );
    }
}
