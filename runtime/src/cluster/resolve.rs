//! Which source wins: the command line, then `TF_CONFIG`, then torchrun's variables, then
//! Slurm.
//!
//! The most explicit source wins, and the sources below it are not read at all: a flag
//! given to override a broken `TF_CONFIG` must not fail on that `TF_CONFIG`, and a
//! `TF_CONFIG` set inside a Slurm allocation (Kubeflow-style launchers on Slurm) is the
//! user's intent, not the allocation's shape.

use super::flags::{ClusterFlags, from_flags};
use super::slurm::{DEFAULT_SLURM_PORT_BASE, from_slurm};
use super::tf_config::{TF_CONFIG, from_tf_config};
use super::torchrun::{RENDEZVOUS_TIMEOUT, from_torchrun};
use super::{Cluster, ClusterError};

/// The cluster from the first configured source, or `None` for a single process. `env`
/// looks up an environment variable; [`resolve_from_process_env`] passes the real one.
pub fn resolve(flags: &ClusterFlags, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Cluster>, ClusterError> {
    if !flags.is_empty() {
        return from_flags(flags);
    }
    if let Some(cluster) = env(TF_CONFIG).map(|json| from_tf_config(&json)).transpose()?.flatten() {
        return Ok(Some(cluster));
    }
    // Named by the user's launcher (torchrun, a PyTorchJob), so more specific than the
    // allocation a Slurm step would describe.
    if let Some(cluster) = from_torchrun(env, RENDEZVOUS_TIMEOUT)? {
        return Ok(Some(cluster));
    }
    from_slurm(env, DEFAULT_SLURM_PORT_BASE)
}

/// [`resolve`] with this process's environment. A variable that is not valid UTF-8 is read
/// lossily, so that it fails with the source's syntax error rather than as if it were unset.
pub fn resolve_from_process_env(flags: &ClusterFlags) -> Result<Option<Cluster>, ClusterError> {
    resolve(flags, &|name| std::env::var_os(name).map(|value| value.to_string_lossy().into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterSource, TaskId, TaskType};
    use std::collections::BTreeMap;

    const TF_CONFIG_WORKER_1: &str =
        r#"{"cluster": {"worker": ["tf0:1", "tf1:1"]}, "task": {"type": "worker", "index": 1}}"#;

    fn slurm_step() -> BTreeMap<String, String> {
        [
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_STEP_NODELIST", "s[1-2]"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into()
    }

    fn with_tf_config(mut env: BTreeMap<String, String>, json: &str) -> BTreeMap<String, String> {
        env.insert(TF_CONFIG.to_string(), json.to_string());
        env
    }

    fn flags(cluster: &str, task: &str) -> ClusterFlags {
        ClusterFlags { cluster: vec![cluster.to_string()], task: Some(task.to_string()) }
    }

    fn resolved(flags: &ClusterFlags, env: &BTreeMap<String, String>) -> Result<Option<Cluster>, ClusterError> {
        resolve(flags, &|name| env.get(name).cloned())
    }

    fn source(flags: &ClusterFlags, env: &BTreeMap<String, String>) -> ClusterSource {
        resolved(flags, env).unwrap().unwrap().source()
    }

    #[test]
    fn nothing_configured_is_a_single_process() {
        assert_eq!(resolved(&ClusterFlags::default(), &BTreeMap::new()), Ok(None));
    }

    #[test]
    fn flags_win_over_tf_config_and_slurm() {
        let env = with_tf_config(slurm_step(), TF_CONFIG_WORKER_1);
        let cluster = resolved(&flags("worker=f0:1,f1:1", "worker:0"), &env).unwrap().unwrap();
        assert_eq!(cluster.source(), ClusterSource::Flags);
        assert_eq!(cluster.address(), Some("f0:1"));
    }

    #[test]
    fn tf_config_wins_over_slurm() {
        let env = with_tf_config(slurm_step(), TF_CONFIG_WORKER_1);
        let cluster = resolved(&ClusterFlags::default(), &env).unwrap().unwrap();
        assert_eq!(cluster.source(), ClusterSource::TfConfig);
        assert_eq!(cluster.task(), TaskId::new(TaskType::Worker, 1));
    }

    #[test]
    fn slurm_is_the_last_resort() {
        assert_eq!(source(&ClusterFlags::default(), &slurm_step()), ClusterSource::Slurm);
    }

    #[test]
    fn an_empty_tf_config_falls_through_to_slurm() {
        assert_eq!(source(&ClusterFlags::default(), &with_tf_config(slurm_step(), "{}")), ClusterSource::Slurm);
        assert_eq!(source(&ClusterFlags::default(), &with_tf_config(slurm_step(), "")), ClusterSource::Slurm);
    }

    #[test]
    fn a_shadowed_source_is_not_read() {
        let env = with_tf_config(BTreeMap::new(), "{not json");
        assert_eq!(source(&flags("worker=f0:1", "worker:0"), &env), ClusterSource::Flags);
        let mut broken_slurm = slurm_step();
        broken_slurm.insert("SLURM_STEP_NODELIST".into(), "s[1-".into());
        assert_eq!(
            source(&ClusterFlags::default(), &with_tf_config(broken_slurm, TF_CONFIG_WORKER_1)),
            ClusterSource::TfConfig
        );
    }

    #[test]
    fn the_winning_source_fails_loudly_instead_of_falling_through() {
        let env = with_tf_config(slurm_step(), "{not json");
        let error = resolved(&ClusterFlags::default(), &env).unwrap_err();
        assert!(
            matches!(error, ClusterError::Json { origin: ClusterSource::TfConfig, line: 1, column: 2, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn the_process_environment_can_be_read() {
        // Only checks that the real environment is consulted without failing; the test
        // runner's environment is not ours to set.
        let flags = flags("worker=f0:1", "worker:0");
        assert_eq!(resolve_from_process_env(&flags).unwrap().unwrap().source(), ClusterSource::Flags);
    }
}
