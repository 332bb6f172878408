//! The cluster's task lists, and the rules that give each task its rank.

use super::task::{TaskId, TaskType};
use serde::Serialize;
use std::fmt;

/// The addresses (`host:port`) of every task, by role, in index order: `worker[1]` is the
/// address of `worker:1`. The same shape as `TF_CONFIG`'s `cluster` when serialized; read
/// one with [`from_tf_config`](super::from_tf_config), which validates it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClusterSpec {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chief: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worker: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ps: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evaluator: Vec<String>,
}

impl ClusterSpec {
    /// The addresses of one role.
    pub fn tasks(&self, task_type: TaskType) -> &[String] {
        match task_type {
            TaskType::Chief => &self.chief,
            TaskType::Worker => &self.worker,
            TaskType::Ps => &self.ps,
            TaskType::Evaluator => &self.evaluator,
        }
    }

    pub(crate) fn tasks_mut(&mut self, task_type: TaskType) -> &mut Vec<String> {
        match task_type {
            TaskType::Chief => &mut self.chief,
            TaskType::Worker => &mut self.worker,
            TaskType::Ps => &mut self.ps,
            TaskType::Evaluator => &mut self.evaluator,
        }
    }

    pub fn address(&self, task: &TaskId) -> Option<&str> {
        self.tasks(task.task_type).get(task.index).map(String::as_str)
    }

    /// Every task, role by role (chief, worker, ps, evaluator), each in index order.
    pub fn task_ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        TaskType::ALL.into_iter().flat_map(|t| (0..self.tasks(t).len()).map(move |i| TaskId::new(t, i)))
    }

    /// True when the cluster has no task at all.
    pub fn is_empty(&self) -> bool {
        TaskType::ALL.iter().all(|&t| self.tasks(t).is_empty())
    }

    /// How many tasks take part in collectives: the chief and the workers. This is the
    /// number the input is sharded by and the gradients are averaged over.
    pub fn collective_group_size(&self) -> usize {
        self.chief.len() + self.worker.len()
    }

    /// The task's rank in the collective group: the chief is rank 0 when there is one, then
    /// the workers in index order, as in TensorFlow's `MultiWorkerMirroredStrategy`. `None`
    /// for ps and evaluator tasks, which never join a collective, and for tasks not in the
    /// cluster.
    pub fn collective_rank(&self, task: &TaskId) -> Option<usize> {
        self.address(task)?;
        match task.task_type {
            TaskType::Chief => Some(task.index),
            TaskType::Worker => Some(self.chief.len() + task.index),
            TaskType::Ps | TaskType::Evaluator => None,
        }
    }

    /// The tasks of the collective group in rank order.
    pub fn collective_tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.task_ids().filter(|task| task.task_type.is_collective())
    }

    /// The task that saves checkpoints and writes summaries: the chief, or worker 0 when the
    /// cluster has no chief (TensorFlow's rule, so that a `TF_CONFIG` of workers only still
    /// has one task doing the once-per-cluster work).
    pub fn chief(&self) -> Option<TaskId> {
        if !self.chief.is_empty() {
            Some(TaskId::new(TaskType::Chief, 0))
        } else if !self.worker.is_empty() {
            Some(TaskId::new(TaskType::Worker, 0))
        } else {
            None
        }
    }

    pub fn is_chief(&self, task: &TaskId) -> bool {
        self.chief().as_ref() == Some(task)
    }

    /// The `TF_CONFIG` that tells `task` its place in this cluster: what a launcher sets in
    /// the environment of each process it starts.
    pub fn to_tf_config(&self, task: &TaskId, environment: Option<&str>) -> String {
        let mut config = serde_json::json!({
            "cluster": self,
            "task": { "type": task.task_type, "index": task.index },
        });
        if let (Some(environment), Some(object)) = (environment, config.as_object_mut()) {
            object.insert("environment".to_string(), environment.into());
        }
        config.to_string()
    }
}

/// The `--cluster` syntax (`chief=h:1;worker=h:2,h:3`), so that a printed cluster can be
/// pasted back on a command line.
impl fmt::Display for ClusterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut separator = "";
        for task_type in TaskType::ALL {
            let addresses = self.tasks(task_type);
            if !addresses.is_empty() {
                write!(f, "{separator}{task_type}={}", addresses.join(","))?;
                separator = ";";
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn chief_and_two_workers() -> ClusterSpec {
        ClusterSpec {
            chief: strings(&["c:1"]),
            worker: strings(&["w:1", "w:2"]),
            ps: strings(&["p:1"]),
            evaluator: strings(&["e:1"]),
        }
    }

    #[test]
    fn chief_is_rank_zero_and_workers_follow() {
        let spec = chief_and_two_workers();
        assert_eq!(spec.collective_group_size(), 3);
        assert_eq!(spec.collective_rank(&TaskId::new(TaskType::Chief, 0)), Some(0));
        assert_eq!(spec.collective_rank(&TaskId::new(TaskType::Worker, 0)), Some(1));
        assert_eq!(spec.collective_rank(&TaskId::new(TaskType::Worker, 1)), Some(2));
        let ranked: Vec<String> = spec.collective_tasks().map(|t| t.to_string()).collect();
        assert_eq!(ranked, ["chief:0", "worker:0", "worker:1"]);
    }

    #[test]
    fn ps_evaluator_and_absent_tasks_have_no_rank() {
        let spec = chief_and_two_workers();
        assert_eq!(spec.collective_rank(&TaskId::new(TaskType::Ps, 0)), None);
        assert_eq!(spec.collective_rank(&TaskId::new(TaskType::Evaluator, 0)), None);
        assert_eq!(spec.collective_rank(&TaskId::new(TaskType::Worker, 2)), None);
    }

    #[test]
    fn the_chief_is_the_chief_when_there_is_one() {
        let spec = chief_and_two_workers();
        assert!(spec.is_chief(&TaskId::new(TaskType::Chief, 0)));
        assert!(!spec.is_chief(&TaskId::new(TaskType::Worker, 0)));
    }

    #[test]
    fn without_a_chief_worker_zero_is_chief_and_rank_zero() {
        let spec = ClusterSpec { worker: strings(&["w:1", "w:2"]), ..ClusterSpec::default() };
        assert_eq!(spec.chief(), Some(TaskId::new(TaskType::Worker, 0)));
        assert!(spec.is_chief(&TaskId::new(TaskType::Worker, 0)));
        assert!(!spec.is_chief(&TaskId::new(TaskType::Worker, 1)));
        assert_eq!(spec.collective_rank(&TaskId::new(TaskType::Worker, 0)), Some(0));
        assert_eq!(spec.collective_group_size(), 2);
    }

    #[test]
    fn a_cluster_of_ps_only_has_no_chief() {
        let spec = ClusterSpec { ps: strings(&["p:1"]), ..ClusterSpec::default() };
        assert_eq!(spec.chief(), None);
        assert!(!spec.is_chief(&TaskId::new(TaskType::Ps, 0)));
    }

    #[test]
    fn addresses_and_task_ids_follow_the_lists() {
        let spec = chief_and_two_workers();
        assert_eq!(spec.address(&TaskId::new(TaskType::Worker, 1)), Some("w:2"));
        assert_eq!(spec.address(&TaskId::new(TaskType::Worker, 2)), None);
        let all: Vec<String> = spec.task_ids().map(|t| t.to_string()).collect();
        assert_eq!(all, ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]);
        assert!(!spec.is_empty());
        assert!(ClusterSpec::default().is_empty());
    }

    #[test]
    fn display_uses_the_flag_syntax() {
        assert_eq!(chief_and_two_workers().to_string(), "chief=c:1;worker=w:1,w:2;ps=p:1;evaluator=e:1");
        assert_eq!(ClusterSpec::default().to_string(), "");
    }

    #[test]
    fn tf_config_for_a_task_omits_empty_roles() {
        let spec = ClusterSpec { worker: strings(&["w:1", "w:2"]), ..ClusterSpec::default() };
        let json = spec.to_tf_config(&TaskId::new(TaskType::Worker, 1), Some("cloud"));
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        let expected = serde_json::json!({
            "cluster": { "worker": ["w:1", "w:2"] },
            "task": { "type": "worker", "index": 1 },
            "environment": "cloud",
        });
        assert_eq!(parsed, expected);
    }
}
