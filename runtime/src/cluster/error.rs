//! What can go wrong while resolving a cluster.
//!
//! Every variant names the source it came from (`--cluster/--task`, `TF_CONFIG`, torchrun,
//! Slurm) and the field or task at fault, because a misconfigured cluster is usually noticed
//! on one machine of many, by someone who has to find the line of the launch script to fix.

use super::ClusterSource;
use super::task::{TaskId, TaskType};
use thiserror::Error;

/// The valid role names, for error messages.
pub(crate) const VALID_ROLES: &str = "chief, worker, ps, evaluator";

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClusterError {
    /// `TF_CONFIG` is not JSON, or not JSON of the expected shape; `message` is serde's and
    /// ends with the line and column.
    #[error("{origin}: {kind}: {message}")]
    Json { origin: ClusterSource, kind: &'static str, message: String, line: usize, column: usize },

    /// A flag or variable whose text does not follow its syntax.
    #[error("{origin}: {field} = '{value}': {reason}")]
    Syntax { origin: ClusterSource, field: String, value: String, reason: String },

    #[error("{origin}: unknown role '{role}' in {field}; valid roles are {valid}")]
    UnknownRole { origin: ClusterSource, field: String, role: String, valid: String },

    #[error("{origin}: the {role} role is given twice (as '{first}' and as '{second}')")]
    DuplicateRole { origin: ClusterSource, role: TaskType, first: String, second: String },

    /// A cluster without this process's place in it: every process needs to know which task
    /// it is, and guessing would give two processes the same one.
    #[error("{origin}: the cluster is given but not this process's task; {hint}")]
    MissingTask { origin: ClusterSource, hint: &'static str },

    #[error("{origin}: a task is given ({task}) but no cluster; {hint}")]
    TaskWithoutCluster { origin: ClusterSource, task: String, hint: &'static str },

    #[error("{origin}: the task's index is missing, and the cluster has {} to choose from", count_tasks(*.task_type, *.count))]
    MissingTaskIndex { origin: ClusterSource, task_type: TaskType, count: usize },

    #[error("{origin}: a variable is missing: {name} is not set although {because}")]
    MissingVariable { origin: ClusterSource, name: &'static str, because: String },

    /// Values that parse one by one but contradict each other (Slurm's node list and task
    /// counts, for instance).
    #[error("{origin}: {reason}")]
    Inconsistent { origin: ClusterSource, reason: String },

    #[error("{origin}: the cluster has no chief and no workers, so no task would train{}", others_suffix(.others))]
    EmptyCluster { origin: ClusterSource, others: Vec<TaskType> },

    #[error("{origin}: the cluster has {} ({}); at most one is allowed", count_tasks(*.task_type, .addresses.len()), .addresses.join(", "))]
    TooManyTasks { origin: ClusterSource, task_type: TaskType, addresses: Vec<String> },

    #[error("{origin}: task {task} is not in the cluster: it has no {} tasks (it has {present})", .task.task_type)]
    TaskNotInCluster { origin: ClusterSource, task: TaskId, present: String },

    #[error("{origin}: task {task} is out of range: the cluster has {available}")]
    IndexOutOfRange { origin: ClusterSource, task: TaskId, available: String },

    #[error("{origin}: task {task} has an invalid address '{address}': {reason}")]
    InvalidAddress { origin: ClusterSource, task: TaskId, address: String, reason: String },

    /// Two tasks on one address would both try to listen there; the second fails at startup
    /// with an error far less clear than this one.
    #[error("{origin}: tasks {first} and {second} have the same address '{address}'")]
    DuplicateAddress { origin: ClusterSource, address: String, first: TaskId, second: TaskId },
}

/// A task type or task id that does not parse (`"wroker"`, `"worker:x"`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("'{input}' is not a task: {reason}")]
pub struct ParseTaskError {
    pub input: String,
    pub reason: String,
}

/// "2 workers", "1 chief", "no ps tasks": counts as a person would write them.
pub(crate) fn count_tasks(task_type: TaskType, count: usize) -> String {
    let (one, many) = match task_type {
        TaskType::Chief => ("chief", "chiefs"),
        TaskType::Worker => ("worker", "workers"),
        TaskType::Ps => ("ps task", "ps tasks"),
        TaskType::Evaluator => ("evaluator", "evaluators"),
    };
    match count {
        0 => format!("no {many}"),
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

/// The tasks of one role, shortened in the middle for big clusters so that the message
/// stays one readable line: `worker:0, worker:1, worker:2, …, worker:255`.
pub(crate) fn list_tasks(task_type: TaskType, count: usize) -> String {
    const SHOWN: usize = 3;
    let name = |index| TaskId::new(task_type, index).to_string();
    if count <= SHOWN + 2 {
        (0..count).map(name).collect::<Vec<_>>().join(", ")
    } else {
        let head: Vec<String> = (0..SHOWN).map(name).collect();
        format!("{}, …, {}", head.join(", "), name(count - 1))
    }
}

fn others_suffix(others: &[TaskType]) -> String {
    if others.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = others.iter().map(|t| t.as_str()).collect();
        format!(" (it has only {})", names.join(", "))
    }
}
