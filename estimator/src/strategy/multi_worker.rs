//! `multi_worker`: TensorFlow's MultiWorkerMirroredStrategy. Every chief and worker task of
//! the cluster is one replica in its own process; the graph passes are mirrored's (loss
//! scaled by the global replica count, gradients all-reduced in buckets), and the
//! collective behind the `AllReduce` nodes is the network group instead of threads.
//!
//! The group connects lazily, when the first graph is compiled: the handshake compares
//! the compiled graph's fingerprint, so a task started with another spec is refused before
//! any step runs. It is kept for the life of the strategy, so successive `train` calls
//! (and their collectives' sequence numbers) continue on one connection.
//!
//! With `elastic` rules the membership can change: after a lost worker the training loop
//! drops the group and calls [`Strategy::reform`], which holds the rendezvous; replica
//! count, rank, chief and input then follow the new membership, and the next compiled
//! graph connects the new epoch's group. Every task of an elastic job reads the whole
//! training input (one pipeline, in the one-process order) and takes its share of each
//! global batch, so the examples of a step do not depend on how many workers there are.
//! A job with a cluster token may take tasks from outside its cluster spec (up to
//! `max_workers`); the fingerprint they must match names the job, not the cluster or the
//! replica count.

use super::{Stage, Strategy, StrategyOptions, mirrored::all_reduce_passes};
use crate::{EstimatorError, Result, input::InputContext};
use engine_graph::passes::{Pass, strategy::AgreeOnStop};
use engine_runtime::{
    Collective, Device,
    cluster::{Cluster, TaskType},
    transport::{
        Communication, ElasticConfig, Membership, NetworkConfig, NetworkGroup, RoundRules, find_running_job,
        join_running, rendezvous,
    },
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct MultiWorkerStrategy {
    cluster: Cluster,
    device: Device,
    bucket_bytes: usize,
    collective_timeout: Duration,
    connect_timeout: Duration,
    token: Option<String>,
    communication: Communication,
    /// The connected group and the fingerprint it was connected for.
    group: Mutex<Option<(String, Arc<NetworkGroup>)>>,
    /// Re-form instead of stopping when a worker is lost.
    elastic: Option<RoundRules>,
    /// Who trains now: the cluster's chief and workers until an elastic job re-forms.
    membership: Mutex<Membership>,
    /// The fingerprint of the first group, which names the job in every rendezvous.
    job: Mutex<Option<String>>,
    /// The members the last re-formation found lost.
    lost: Mutex<Vec<engine_runtime::cluster::TaskId>>,
}

impl MultiWorkerStrategy {
    pub fn new(options: &StrategyOptions) -> Result<Self> {
        let cluster = options.cluster.clone().ok_or_else(|| {
            EstimatorError::Config(
                "strategy 'multi_worker' needs a cluster: set TF_CONFIG, pass --cluster and --task, run under torchrun \
                 or Slurm, or start a local one with `engine launch`"
                    .into(),
            )
        })?;
        let ps = cluster.spec().tasks(TaskType::Ps);
        if !ps.is_empty() {
            return Err(EstimatorError::Config(format!(
                "strategy 'multi_worker' keeps every variable on every worker, but cluster {} has {} ps task(s): use \
                 --strategy parameter_server, or remove the ps tasks",
                cluster.spec(),
                ps.len()
            )));
        }
        // A rendezvous is a connect: it waits for the minimum as long as a connect waits.
        let workers = cluster.collective_group_size();
        let elastic = options
            .elastic
            .map(|rules| {
                let rules = RoundRules { timeout: options.connect_timeout, ..rules };
                elastic_bounds(rules, workers, options.cluster_token.is_some())
            })
            .transpose()?;
        Ok(MultiWorkerStrategy {
            device: options.open_device()?,
            bucket_bytes: options.all_reduce_bucket_bytes,
            collective_timeout: options.collective_timeout,
            connect_timeout: options.connect_timeout,
            token: options.cluster_token.as_ref().map(|t| t.0.clone()),
            communication: options.communication,
            group: Mutex::new(None),
            elastic,
            membership: Mutex::new(Membership::initial(cluster.spec())),
            job: Mutex::new(None),
            lost: Mutex::new(Vec::new()),
            cluster,
        })
    }

    fn membership(&self) -> Membership {
        self.membership.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn replicas(&self) -> usize {
        self.membership().size().max(1)
    }

    fn rank(&self) -> Option<usize> {
        self.membership().rank_of(&self.cluster.task())
    }

    fn network_config(&self, fingerprint: &str) -> NetworkConfig {
        NetworkConfig {
            cluster: self.cluster.clone(),
            fingerprint: fingerprint.to_string(),
            token: self.token.clone(),
            collective_timeout: self.collective_timeout,
            connect_timeout: self.connect_timeout,
            tls: None,
            communication: self.communication,
        }
    }

    fn elastic_config(&self, rules: RoundRules, job: &str) -> ElasticConfig {
        ElasticConfig {
            network: self.network_config(job),
            rules,
            // A quarter of the round's wait, so that a survivor probing a lost member it did
            // not see go still reaches the round in time.
            probe: (rules.timeout / 4).min(std::time::Duration::from_secs(10)),
        }
    }

    /// This task's pipeline: an elastic job's tasks all read the whole input (each takes
    /// its rows of every global batch); otherwise worker `i` reads its shard.
    fn context(&self) -> InputContext {
        match self.elastic {
            Some(_) => {
                InputContext { num_input_pipelines: 1, input_pipeline_id: 0, num_replicas_in_sync: self.replicas() }
            }
            None => InputContext {
                num_input_pipelines: self.replicas(),
                input_pipeline_id: self.rank().unwrap_or(0),
                num_replicas_in_sync: self.replicas(),
            },
        }
    }
}

impl Strategy for MultiWorkerStrategy {
    fn kind(&self) -> super::StrategyKind {
        super::StrategyKind::MultiWorker
    }
    fn local_devices(&self) -> Vec<Device> {
        vec![self.device.clone()]
    }
    fn num_replicas_in_sync(&self) -> usize {
        self.replicas()
    }
    fn training_input_context(&self) -> InputContext {
        self.context()
    }
    fn input_context(&self) -> InputContext {
        // The evaluator task is no training pipeline: it reads the whole evaluation input
        // (sharded like a worker's, it covered 1/N of the examples and reported that).
        if self.cluster.task().task_type == TaskType::Evaluator {
            return InputContext::default();
        }
        self.context()
    }
    /// Mirrored's, and tasks agree on a final step when one of them is asked to stop.
    fn passes(&self, stage: Stage, training: bool) -> Vec<Box<dyn Pass>> {
        let mut passes = all_reduce_passes(stage, training, self.replicas(), self.bucket_bytes);
        if stage == Stage::Gradients && training {
            // Before fusion, which packs the request into the last bucket.
            let at = passes.iter().position(|p| p.name() == "all-reduce-fusion").unwrap_or(passes.len());
            passes.insert(at, Box::new(AgreeOnStop));
        }
        passes
    }
    fn collectives(&self, local: usize, fingerprint: &str) -> Result<Option<Vec<Arc<dyn Collective>>>> {
        let task = self.cluster.task();
        if self.rank().is_none() {
            return Err(EstimatorError::Config(format!(
                "task {task} is not in the collective group (only the chief and workers train)"
            )));
        }
        if local != 1 {
            return Err(EstimatorError::Config(format!("multi_worker runs one replica per task, not {local}")));
        }
        let mut slot = self.group.lock().map_err(|_| EstimatorError::Other("collective group lock poisoned".into()))?;
        if let Some((connected_for, group)) = slot.as_ref() {
            if connected_for == fingerprint {
                return Ok(Some(vec![group.clone() as Arc<dyn Collective>]));
            }
            return Err(EstimatorError::Config(format!(
                "task {task} is already connected for job fingerprint {connected_for}; a second graph ({fingerprint}) \
                 cannot share its collective group"
            )));
        }
        let membership = self.membership();
        log::info!("{}: connecting to {} tasks (fingerprint {fingerprint})", self.cluster, membership.size());
        let config = self.network_config(fingerprint);
        let group = match membership.epoch {
            0 => NetworkGroup::connect(config)?,
            _ => NetworkGroup::connect_epoch(config, &membership)?,
        };
        self.job.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| fingerprint.to_string());
        match group.ring_reason() {
            None => log::info!("{}: all-reduce through shared memory (every task is on this host)", self.cluster),
            Some(reason) => log::info!("{}: all-reduce over the gRPC ring ({reason})", self.cluster),
        }
        *slot = Some((fingerprint.to_string(), group.clone()));
        Ok(Some(vec![group as Arc<dyn Collective>]))
    }
    fn is_chief(&self) -> bool {
        match self.elastic {
            // The first member of the epoch: the chief, or the lowest-ranked worker after it.
            Some(_) => self.membership().chief() == Some(self.cluster.task()),
            None => self.cluster.is_chief(),
        }
    }
    fn elastic_membership(&self) -> Option<Membership> {
        self.elastic.map(|_| self.membership())
    }
    fn leads_survivors(&self) -> bool {
        if self.elastic.is_none() {
            return self.is_chief();
        }
        let lost = self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.membership().tasks.into_iter().find(|t| !lost.contains(t)) == Some(self.cluster.task())
    }
    fn elastic_rules(&self) -> Option<RoundRules> {
        self.elastic
    }
    fn join_running_job(&self, fingerprint: &str) -> Result<bool> {
        let Some(rules) = self.elastic else { return Ok(false) };
        let config = self.elastic_config(rules, fingerprint);
        let Some(running) = find_running_job(&config).map_err(engine_runtime::RuntimeError::from)? else {
            return Ok(false);
        };
        let members: Vec<String> = running.tasks.iter().map(ToString::to_string).collect();
        log::info!(
            "{}: the job runs without this task (epoch {}: {}); joining it at its next step",
            self.cluster,
            running.epoch,
            members.join(", ")
        );
        let joined = join_running(&config, &running).map_err(engine_runtime::RuntimeError::from)?;
        log::info!("{}: membership {joined}", self.cluster);
        *self.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(fingerprint.to_string());
        *self.membership.lock().unwrap_or_else(|p| p.into_inner()) = joined;
        Ok(true)
    }
    fn reform(&self, step: u64) -> Result<Membership> {
        let Some(rules) = self.elastic else {
            return Err(EstimatorError::Config("multi_worker without min_workers cannot re-form".into()));
        };
        let old = self.group.lock().map_err(|_| EstimatorError::Other("collective group lock poisoned".into()))?.take();
        let lost = old.as_ref().map(|(_, g)| g.lost_members()).unwrap_or_default();
        let joiners = old.as_ref().map(|(_, g)| g.joiners()).unwrap_or_default();
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone_from(&lost);
        if let Some((_, group)) = old {
            // The rendezvous may be held on this task's address: the old group's server
            // must be gone, so nothing else may still hold the group.
            Arc::try_unwrap(group).map_err(|_| {
                EstimatorError::Other("internal: the collective group is still in use while re-forming".into())
            })?;
        }
        let job = self.job.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default();
        let previous = self.membership();
        let names = |tasks: &[engine_runtime::cluster::TaskId]| {
            let names: Vec<String> = tasks.iter().map(ToString::to_string).collect();
            if names.is_empty() { "none seen".to_string() } else { names.join(", ") }
        };
        let level = if lost.is_empty() { log::Level::Info } else { log::Level::Warn };
        log::log!(
            level,
            "{}: re-forming the group after step {step} ({}); lost: {}; joining: {}",
            self.cluster,
            previous,
            names(&lost),
            names(&joiners)
        );
        let config = self.elastic_config(rules, &job);
        let next =
            rendezvous(&config, &previous, step, &lost, joiners.len()).map_err(engine_runtime::RuntimeError::from)?;
        log::info!("{}: membership {next}", self.cluster);
        *self.membership.lock().unwrap_or_else(|p| p.into_inner()) = next.clone();
        Ok(next)
    }
    fn cluster(&self) -> Option<&Cluster> {
        Some(&self.cluster)
    }
    /// The same on every task (no rank), so that fingerprints agree across the cluster.
    /// An elastic job's names its bounds and buckets, not the cluster: a task from outside
    /// the spec (whose own spec adds it) runs the same job, and the job's identity leaves
    /// the strategy's passes out (see `compile`), so the buckets they would show are here.
    fn describe(&self) -> String {
        match self.elastic {
            Some(r) => format!(
                "multi_worker({}; elastic {}..={} replicas; all-reduce buckets of {} bytes)",
                self.device, r.min, r.max, self.bucket_bytes
            ),
            None => format!("multi_worker({}; {})", self.device, self.cluster.spec()),
        }
    }
    /// The replica count and device, not the addresses (for an elastic job, its bounds:
    /// the count changes as workers come and go, the model does not).
    fn layout(&self) -> String {
        match self.elastic {
            Some(r) => format!("multi_worker({}; elastic {}..={} replicas)", self.device, r.min, r.max),
            None => format!("multi_worker({}; {} replicas)", self.device, self.replicas()),
        }
    }
}

/// The rules with `max` resolved (0: the cluster's workers), checked against the cluster.
/// More than the cluster's chief and workers leaves room for tasks from outside its spec,
/// which a job accepts only with a cluster token (`open`).
fn elastic_bounds(rules: RoundRules, workers: usize, open: bool) -> Result<RoundRules> {
    let max = if rules.max == 0 { workers } else { rules.max };
    if rules.min == 0 || rules.min > max {
        return Err(EstimatorError::Config(format!(
            "min_workers must be between 1 and max_workers ({max}), not {}",
            rules.min
        )));
    }
    if max > workers && !open {
        return Err(EstimatorError::Config(format!(
            "max_workers is {max} but the cluster has {workers} chief and worker tasks, and only a job with a cluster \
             token takes tasks from outside its cluster spec (so that not whoever reaches a port can join): set \
             ENGINE_CLUSTER_TOKEN or --token-file on every task, or max_workers at most {workers}"
        )));
    }
    if rules.min > workers {
        return Err(EstimatorError::Config(format!(
            "min_workers is {} but the cluster has only {workers} chief and worker tasks: the job starts with the \
             cluster's tasks",
            rules.min
        )));
    }
    if max < workers {
        return Err(EstimatorError::Config(format!(
            "max_workers is {max} but the job starts with the cluster's {workers} chief and worker tasks: set it to \
             at least {workers}, or list fewer tasks"
        )));
    }
    Ok(RoundRules { max, ..rules })
}

/// Whether a task trains (chief, worker) or only evaluates.
pub(crate) fn trains(cluster: &Cluster) -> bool {
    matches!(cluster.task().task_type, TaskType::Chief | TaskType::Worker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rules(min: usize, max: usize) -> RoundRules {
        RoundRules { min, max, last_call: Duration::from_secs(2), timeout: Duration::from_secs(60) }
    }

    #[test]
    fn elastic_bounds_default_to_the_cluster_and_pass_it_only_with_a_token() {
        assert_eq!(elastic_bounds(rules(2, 0), 3, false).unwrap().max, 3);
        assert_eq!(elastic_bounds(rules(1, 3), 3, false).unwrap(), rules(1, 3));
        let error = elastic_bounds(rules(1, 2), 3, false).unwrap_err().to_string();
        assert!(error.contains("max_workers is 2 but the job starts with the cluster's 3"), "{error}");
        let error = elastic_bounds(rules(2, 4), 3, false).unwrap_err().to_string();
        assert!(error.contains("max_workers is 4 but the cluster has 3"), "{error}");
        assert!(error.contains("set ENGINE_CLUSTER_TOKEN"), "{error}");
        assert_eq!(elastic_bounds(rules(2, 4), 3, true).unwrap(), rules(2, 4));
        let error = elastic_bounds(rules(4, 0), 3, true).unwrap_err().to_string();
        assert!(error.contains("min_workers must be between 1 and max_workers (3), not 4"), "{error}");
        let error = elastic_bounds(rules(4, 5), 3, true).unwrap_err().to_string();
        assert!(error.contains("min_workers is 4 but the cluster has only 3"), "{error}");
        assert!(elastic_bounds(rules(0, 0), 3, false).is_err());
    }
}
