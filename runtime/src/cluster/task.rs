//! Task types and task ids: the names every log line and error uses for a process.

use super::error::ParseTaskError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The role of a process, with TensorFlow's names so that a `TF_CONFIG` written for
/// TensorFlow means the same here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskType {
    /// Trains like a worker and also does the once-per-cluster work (checkpoints, summaries).
    Chief,
    Worker,
    /// Holds variables for the parameter-server strategy; not in the collective group.
    Ps,
    /// Evaluates checkpoints on its own schedule; not in the collective group, so it can
    /// fall behind or restart without stalling training.
    Evaluator,
}

impl TaskType {
    /// In TensorFlow's order, which is also the order of collective ranks (chief first).
    pub const ALL: [TaskType; 4] = [TaskType::Chief, TaskType::Worker, TaskType::Ps, TaskType::Evaluator];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::Chief => "chief",
            TaskType::Worker => "worker",
            TaskType::Ps => "ps",
            TaskType::Evaluator => "evaluator",
        }
    }

    /// Whether tasks of this type take part in collectives (all-reduce, broadcast).
    pub fn is_collective(self) -> bool {
        matches!(self, TaskType::Chief | TaskType::Worker)
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskType {
    type Err = ParseTaskError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskType::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| ParseTaskError {
            input: s.to_string(),
            reason: format!("unknown task type; valid types are {}", super::error::VALID_ROLES),
        })
    }
}

/// One process of the cluster, written `worker:1` as in TensorFlow's device names
/// (`/job:worker/task:1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskId {
    pub task_type: TaskType,
    pub index: usize,
}

impl TaskId {
    pub fn new(task_type: TaskType, index: usize) -> Self {
        TaskId { task_type, index }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.task_type, self.index)
    }
}

impl FromStr for TaskId {
    type Err = ParseTaskError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let error = |reason: String| ParseTaskError { input: s.to_string(), reason };
        let (task_type, index) =
            s.split_once(':').ok_or_else(|| error("expected type:index, e.g. worker:1".to_string()))?;
        let task_type = task_type.trim().parse::<TaskType>().map_err(|e| error(e.reason))?;
        let index = parse_index(index.trim()).map_err(error)?;
        Ok(TaskId { task_type, index })
    }
}

/// Digits only: `usize::from_str` would accept `+1`, which no launcher writes on purpose.
pub(crate) fn parse_index(text: &str) -> Result<usize, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("the index '{text}' is not a non-negative integer"));
    }
    text.parse::<usize>().map_err(|_| format!("the index '{text}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_types_round_trip_through_their_names() {
        for task_type in TaskType::ALL {
            assert_eq!(task_type.to_string().parse::<TaskType>(), Ok(task_type));
        }
    }

    #[test]
    fn unknown_task_type_lists_the_valid_ones() {
        let error = "master".parse::<TaskType>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "'master' is not a task: unknown task type; valid types are chief, worker, ps, evaluator"
        );
    }

    #[test]
    fn task_ids_print_and_parse_as_type_colon_index() {
        let task = TaskId::new(TaskType::Worker, 1);
        assert_eq!(task.to_string(), "worker:1");
        assert_eq!("worker:1".parse::<TaskId>(), Ok(task));
        assert_eq!(" ps : 3 ".trim().parse::<TaskId>(), Ok(TaskId::new(TaskType::Ps, 3)));
    }

    #[test]
    fn malformed_task_ids_are_refused() {
        for text in
            ["worker", "worker:", "worker:-1", "worker:+1", "worker:x", "boss:0", "worker:99999999999999999999999"]
        {
            assert!(text.parse::<TaskId>().is_err(), "{text} parsed");
        }
    }

    #[test]
    fn only_chief_and_workers_are_collective() {
        assert!(TaskType::Chief.is_collective());
        assert!(TaskType::Worker.is_collective());
        assert!(!TaskType::Ps.is_collective());
        assert!(!TaskType::Evaluator.is_collective());
    }
}
