//! `TF_CONFIG`, TensorFlow's description of a cluster, read as TensorFlow reads it so that
//! launchers written for TensorFlow need no change:
//!
//! ```json
//! {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"],
//!              "ps": ["host3:2222"], "evaluator": ["host4:2222"]},
//!  "task": {"type": "worker", "index": 1},
//!  "environment": "cloud"}
//! ```
//!
//! - `"master"` is accepted as a legacy name of `"chief"`, in `cluster` and in `task.type`:
//!   TensorFlow 1's Estimator wrote it, and old launchers still do. Giving both is an error.
//! - `task.index` may be left out when the role has one task (it is then 0).
//! - An evaluator's `TF_CONFIG` may leave the evaluator out of `cluster`, as TensorFlow's
//!   `train_and_evaluate` documents it.
//! - Other top-level keys (`rpc_layer`, Cloud AI Platform's `job`) are ignored, as in
//!   TensorFlow. A `TF_CONFIG` with neither `cluster` nor `task` means a single process, as
//!   in TensorFlow, unless it has keys nobody is known to write: then a misspelt `cluster`
//!   is the likelier story, and it is reported rather than silently training alone.

use super::error::{ClusterError, VALID_ROLES};
use super::spec::ClusterSpec;
use super::task::TaskType;
use super::validate::resolve_index;
use super::{Cluster, ClusterSource};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;

/// The environment variable's name.
pub const TF_CONFIG: &str = "TF_CONFIG";

const ORIGIN: ClusterSource = ClusterSource::TfConfig;
const LEGACY_CHIEF: &str = "master";
/// The top-level keys TensorFlow and the platforms that set `TF_CONFIG` are known to write.
const KNOWN_KEYS: [&str; 5] = ["cluster", "task", "environment", "rpc_layer", "job"];

#[derive(Debug, Deserialize)]
struct TfConfig {
    #[serde(default)]
    cluster: BTreeMap<String, Vec<String>>,
    task: Option<TfConfigTask>,
    environment: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TfConfigTask {
    #[serde(rename = "type")]
    task_type: String,
    index: Option<usize>,
}

/// The cluster a `TF_CONFIG` value describes; `None` for a blank value or one without
/// `cluster` and `task`.
pub fn from_tf_config(json: &str) -> Result<Option<Cluster>, ClusterError> {
    if json.trim().is_empty() {
        return Ok(None);
    }
    // Unknown keys are skipped by serde rather than collected with `#[serde(flatten)]`,
    // which would buffer the document and lose the line and column of later errors.
    let config: TfConfig = serde_json::from_str(json).map_err(json_error)?;
    if config.cluster.is_empty() && config.task.is_none() {
        let keys: BTreeMap<String, IgnoredAny> = serde_json::from_str(json).map_err(json_error)?;
        let unknown: Vec<&str> = keys.keys().map(String::as_str).filter(|key| !KNOWN_KEYS.contains(key)).collect();
        if unknown.is_empty() {
            return Ok(None);
        }
        return Err(ClusterError::Inconsistent {
            origin: ORIGIN,
            reason: format!(
                "it has neither \"cluster\" nor \"task\" (it has {}); is one misspelt?",
                unknown.join(", ")
            ),
        });
    }
    let spec = spec_from_roles(config.cluster)?;
    let Some(task) = config.task else {
        let hint = "add \"task\": {\"type\": \"worker\", \"index\": 0} with this process's role and index";
        return Err(ClusterError::MissingTask { origin: ORIGIN, hint });
    };
    let task_type = role(&task.task_type, "task.type")?;
    let task = resolve_index(&spec, task_type, task.index, ORIGIN)?;
    Cluster::new(spec, task, ORIGIN, config.environment).map(Some)
}

fn spec_from_roles(roles: BTreeMap<String, Vec<String>>) -> Result<ClusterSpec, ClusterError> {
    let mut spec = ClusterSpec::default();
    let mut given: BTreeMap<TaskType, String> = BTreeMap::new();
    for (name, addresses) in roles {
        let task_type = role(&name, "cluster")?;
        if let Some(first) = given.get(&task_type) {
            return Err(ClusterError::DuplicateRole {
                origin: ORIGIN,
                role: task_type,
                first: first.clone(),
                second: name,
            });
        }
        given.insert(task_type, name);
        *spec.tasks_mut(task_type) = addresses;
    }
    Ok(spec)
}

fn role(name: &str, field: &str) -> Result<TaskType, ClusterError> {
    if name == LEGACY_CHIEF {
        return Ok(TaskType::Chief);
    }
    name.parse::<TaskType>().map_err(|_| ClusterError::UnknownRole {
        origin: ORIGIN,
        field: field.to_string(),
        role: name.to_string(),
        valid: format!("{VALID_ROLES} (and {LEGACY_CHIEF}, the legacy name of chief)"),
    })
}

fn json_error(error: serde_json::Error) -> ClusterError {
    let kind = match error.classify() {
        serde_json::error::Category::Data => "does not have TF_CONFIG's shape",
        _ => "is not valid JSON",
    };
    ClusterError::Json { origin: ORIGIN, kind, message: error.to_string(), line: error.line(), column: error.column() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::TaskId;

    fn cluster(json: &str) -> Cluster {
        from_tf_config(json).unwrap().unwrap()
    }

    fn error(json: &str) -> String {
        from_tf_config(json).unwrap_err().to_string()
    }

    #[test]
    fn the_multi_worker_tutorial_example() {
        let cluster = cluster(
            r#"{"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}}"#,
        );
        assert_eq!(cluster.spec().worker, ["localhost:12345", "localhost:23456"]);
        assert_eq!(cluster.task(), TaskId::new(TaskType::Worker, 0));
        assert_eq!(cluster.source(), ClusterSource::TfConfig);
        assert!(cluster.is_chief(), "worker 0 is the chief when there is no chief");
        assert_eq!((cluster.rank(), cluster.collective_group_size()), (Some(0), 2));
    }

    /// The Keras tutorial writes `'localhost: 12345'`; TensorFlow passes it through, and so
    /// do we, canonicalized.
    #[test]
    fn the_keras_tutorial_example_with_a_space_after_the_colon() {
        let cluster = cluster(
            r#"{"cluster": {"worker": ["localhost: 12345", "localhost: 23456"]}, "task": {"type": "worker", "index": 0}}"#,
        );
        assert_eq!(cluster.spec().worker, ["localhost:12345", "localhost:23456"]);
    }

    /// The distributed training guide's example has the placeholder `port` for ports; the
    /// error says so, naming the first task it meets.
    #[test]
    fn the_distributed_training_guide_example() {
        let example = r#"{"cluster": {"worker": ["host1:port", "host2:port", "host3:port"], "ps": ["host4:port", "host5:port"]},
                          "task": {"type": "worker", "index": 1}}"#;
        assert_eq!(
            error(example),
            "TF_CONFIG: task worker:0 has an invalid address 'host1:port': the port 'port' is not a number"
        );
        let cluster = cluster(&example.replace("port\"", "2222\""));
        assert_eq!(cluster.spec().ps, ["host4:2222", "host5:2222"]);
        assert_eq!((cluster.rank(), cluster.is_chief(), cluster.address()), (Some(1), false, Some("host2:2222")));
    }

    const TRAIN_AND_EVALUATE_CLUSTER: &str = r#""cluster": {
        "chief": ["host0:2222"],
        "worker": ["host1:2222", "host2:2222", "host3:2222"],
        "ps": ["host4:2222", "host5:2222"]
    }"#;

    /// `tf.estimator.train_and_evaluate`'s examples, one per role.
    #[test]
    fn the_train_and_evaluate_examples() {
        let with_task = |task: &str| cluster(&format!(r#"{{{TRAIN_AND_EVALUATE_CLUSTER}, "task": {task}}}"#));
        let chief = with_task(r#"{"type": "chief", "index": 0}"#);
        assert_eq!((chief.rank(), chief.is_chief(), chief.collective_group_size()), (Some(0), true, 4));
        let worker = with_task(r#"{"type": "worker", "index": 2}"#);
        assert_eq!((worker.rank(), worker.is_chief(), worker.address()), (Some(3), false, Some("host3:2222")));
        let ps = with_task(r#"{"type": "ps", "index": 1}"#);
        assert_eq!((ps.rank(), ps.is_chief(), ps.address()), (None, false, Some("host5:2222")));
        let evaluator = with_task(r#"{"type": "evaluator", "index": 0}"#);
        assert_eq!((evaluator.rank(), evaluator.is_chief(), evaluator.address()), (None, false, None));
    }

    #[test]
    fn kubeflow_environment_is_kept() {
        let cluster = cluster(
            r#"{"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": {"type": "worker", "index": 0}, "environment": "cloud"}"#,
        );
        assert_eq!(cluster.environment(), Some("cloud"));
        assert!(!cluster.is_chief());
    }

    #[test]
    fn evaluator_listed_in_the_cluster() {
        let cluster = cluster(
            r#"{"cluster": {"worker": ["w:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 0}}"#,
        );
        assert_eq!((cluster.address(), cluster.rank()), (Some("e:1"), None));
    }

    #[test]
    fn master_is_the_legacy_name_of_chief() {
        let cluster =
            cluster(r#"{"cluster": {"master": ["m:1"], "worker": ["w:1"]}, "task": {"type": "master", "index": 0}}"#);
        assert_eq!(cluster.spec().chief, ["m:1"]);
        assert_eq!(cluster.task(), TaskId::new(TaskType::Chief, 0));
        assert!(cluster.is_chief());
        assert_eq!(
            error(r#"{"cluster": {"master": ["m:1"], "chief": ["c:1"]}, "task": {"type": "chief"}}"#),
            "TF_CONFIG: the chief role is given twice (as 'chief' and as 'master')"
        );
    }

    #[test]
    fn other_keys_are_ignored_as_in_tensorflow() {
        let cluster = cluster(
            r#"{"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc", "job": {"args": []}}"#,
        );
        assert_eq!(cluster.task(), TaskId::new(TaskType::Worker, 0));
    }

    #[test]
    fn blank_or_empty_means_a_single_process() {
        assert_eq!(from_tf_config(""), Ok(None));
        assert_eq!(from_tf_config("  \n"), Ok(None));
        assert_eq!(from_tf_config("{}"), Ok(None));
        assert_eq!(from_tf_config(r#"{"cluster": {}, "environment": "cloud", "rpc_layer": "grpc"}"#), Ok(None));
    }

    #[test]
    fn a_misspelt_cluster_is_reported() {
        assert_eq!(
            error(r#"{"clsuter": {"worker": ["w:1"]}, "tsak": {}}"#),
            "TF_CONFIG: it has neither \"cluster\" nor \"task\" (it has clsuter, tsak); is one misspelt?"
        );
    }

    #[test]
    fn malformed_json_gives_line_and_column() {
        let result = from_tf_config("{\"cluster\": {\"worker\": [\"w:1\"]\n \"task\": {}}");
        let Err(ClusterError::Json { line, column, .. }) = &result else { panic!("{result:?}") };
        assert_eq!((*line, *column), (2, 2));
        assert_eq!(
            result.unwrap_err().to_string(),
            "TF_CONFIG: is not valid JSON: expected `,` or `}` at line 2 column 2"
        );
    }

    #[test]
    fn json_of_the_wrong_shape_says_where() {
        assert_eq!(
            error(r#"{"cluster": {"worker": "w:1"}, "task": {"type": "worker", "index": 0}}"#),
            "TF_CONFIG: does not have TF_CONFIG's shape: invalid type: string \"w:1\", expected a sequence at line 1 column 28"
        );
        assert_eq!(
            error(r#"{"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": -1}}"#),
            "TF_CONFIG: does not have TF_CONFIG's shape: invalid value: integer `-1`, expected usize at line 1 column 71"
        );
        assert_eq!(
            error(r#"{"cluster": {"worker": ["w:1"]}, "task": {"index": 0}}"#),
            "TF_CONFIG: does not have TF_CONFIG's shape: missing field `type` at line 1 column 53"
        );
    }

    #[test]
    fn unknown_roles_list_the_valid_ones() {
        assert_eq!(
            error(r#"{"cluster": {"workers": ["w:1"]}, "task": {"type": "worker", "index": 0}}"#),
            "TF_CONFIG: unknown role 'workers' in cluster; valid roles are chief, worker, ps, evaluator (and master, the legacy name of chief)"
        );
        assert_eq!(
            error(r#"{"cluster": {"worker": ["w:1"]}, "task": {"type": "boss", "index": 0}}"#),
            "TF_CONFIG: unknown role 'boss' in task.type; valid roles are chief, worker, ps, evaluator (and master, the legacy name of chief)"
        );
    }

    #[test]
    fn a_cluster_without_a_task_is_refused() {
        assert_eq!(
            error(r#"{"cluster": {"worker": ["w:1"]}}"#),
            "TF_CONFIG: the cluster is given but not this process's task; add \"task\": {\"type\": \"worker\", \"index\": 0} with this process's role and index"
        );
    }

    #[test]
    fn a_task_without_a_cluster_is_an_empty_cluster() {
        assert_eq!(
            error(r#"{"task": {"type": "worker", "index": 0}}"#),
            "TF_CONFIG: the cluster has no chief and no workers, so no task would train"
        );
    }

    #[test]
    fn tf_config_goes_through_the_validator() {
        assert_eq!(
            error(r#"{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 3}}"#),
            "TF_CONFIG: task worker:3 is out of range: the cluster has 2 workers (worker:0, worker:1)"
        );
        assert_eq!(
            error(
                r#"{"cluster": {"chief": ["a:1", "b:1"], "worker": ["c:1"]}, "task": {"type": "worker", "index": 0}}"#
            ),
            "TF_CONFIG: the cluster has 2 chiefs (a:1, b:1); at most one is allowed"
        );
        assert_eq!(
            error(r#"{"cluster": {"worker": ["a:1"], "ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}"#),
            "TF_CONFIG: tasks worker:0 and ps:0 have the same address 'a:1'"
        );
    }
}
