//! The handshake: before any data flows, each task tells each peer who it is and which job
//! it runs, and both refuse to go on unless they agree.
//!
//! Like DDP's check that every rank builds the same model, this turns a launch mistake
//! (a stale binary, another job's `TF_CONFIG`, a changed spec on one machine) into an error
//! at startup naming both tasks, instead of gradients silently averaged across different
//! models or a hang at the first all-reduce.

use super::members::Members;
use super::proto::{HelloReply, HelloRequest, TaskIdentity};
use crate::cluster::TaskId;

/// Bumped whenever the meaning of frames changes, so that two builds that would
/// misunderstand each other refuse each other instead.
pub(super) const PROTOCOL_VERSION: u32 = 2;

/// What a task says about itself, from either side of the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Claim {
    pub protocol_version: u32,
    pub identity: Option<TaskIdentity>,
    pub fingerprint: String,
    pub group_size: u32,
    pub epoch: u64,
}

impl From<HelloRequest> for Claim {
    fn from(hello: HelloRequest) -> Self {
        Claim {
            protocol_version: hello.protocol_version,
            identity: hello.sender,
            fingerprint: hello.fingerprint,
            group_size: hello.group_size,
            epoch: hello.epoch,
        }
    }
}

impl From<HelloReply> for Claim {
    fn from(reply: HelloReply) -> Self {
        Claim {
            protocol_version: reply.protocol_version,
            identity: reply.receiver,
            fingerprint: reply.fingerprint,
            group_size: reply.group_size,
            epoch: reply.epoch,
        }
    }
}

fn identity(members: &Members) -> TaskIdentity {
    let me = members.me();
    TaskIdentity { task: me.task.to_string(), address: me.address.clone(), rank: members.me as u32 }
}

pub(super) fn hello(members: &Members, fingerprint: &str) -> HelloRequest {
    HelloRequest {
        protocol_version: PROTOCOL_VERSION,
        sender: Some(identity(members)),
        fingerprint: fingerprint.to_string(),
        group_size: members.size() as u32,
        epoch: members.epoch,
    }
}

pub(super) fn reply(members: &Members, fingerprint: &str) -> HelloReply {
    HelloReply {
        protocol_version: PROTOCOL_VERSION,
        receiver: Some(identity(members)),
        fingerprint: fingerprint.to_string(),
        group_size: members.size() as u32,
        epoch: members.epoch,
    }
}

/// The peer a claim names, as errors write it: `worker:1 at 10.0.0.2:2222`.
pub(super) fn claimed_name(claim: &Claim) -> String {
    match &claim.identity {
        Some(id) => format!("{} at {}", id.task, id.address),
        None => "a task that did not name itself".to_string(),
    }
}

/// Whether a claim names another member of this group at its address: a refused member
/// fails the group's startup, a refused stranger does not.
///
/// A task of another membership epoch is no member: a worker still in the old group of an
/// elastic job must not stop the re-formed one from connecting.
pub(super) fn names_a_member(members: &Members, claim: &Claim) -> bool {
    let Some(id) = &claim.identity else { return false };
    if claim.epoch != members.epoch {
        return false;
    }
    let Ok(task) = id.task.parse::<TaskId>() else { return false };
    members.members.iter().enumerate().any(|(rank, m)| rank != members.me && m.task == task && m.address == id.address)
}

/// Checks a peer's claim against this task's view of the job; returns the peer's rank, or
/// why the two tasks must not train together (naming both).
pub(super) fn check(members: &Members, fingerprint: &str, claim: &Claim) -> Result<usize, String> {
    let me = members.describe(members.me);
    let peer = claimed_name(claim);
    if claim.protocol_version != PROTOCOL_VERSION {
        return Err(format!(
            "{peer} speaks collective protocol version {}, {me} version {PROTOCOL_VERSION}: the tasks run different builds of the engine",
            claim.protocol_version
        ));
    }
    let id = claim.identity.as_ref().ok_or_else(|| format!("{peer}'s handshake names no task"))?;
    if claim.epoch != members.epoch {
        return Err(format!(
            "{peer} is in membership epoch {} of the job, {me} in epoch {}: a task of an earlier epoch must join the \
             job's rendezvous again instead of reaching the re-formed group",
            claim.epoch, members.epoch
        ));
    }
    let task: TaskId = id.task.parse().map_err(|e| format!("{peer}'s handshake names no valid task: {e}"))?;
    let rank = members.members.iter().position(|m| m.task == task).ok_or_else(|| {
        format!("{peer} is not in the collective group of {me}'s cluster: the tasks were given different clusters")
    })?;
    let mine = &members.members[rank];
    if mine.address != id.address || rank != id.rank as usize {
        return Err(format!(
            "{peer} (rank {}) is {task} at {} (rank {rank}) in {me}'s cluster: the tasks were given different clusters",
            id.rank, mine.address
        ));
    }
    if rank == members.me {
        return Err(format!("{peer} claims to be {me} itself: two processes were given the same task"));
    }
    if claim.group_size as usize != members.size() {
        return Err(format!(
            "{peer} has a collective group of {} tasks, {me} one of {}: the tasks were given different clusters",
            claim.group_size,
            members.size()
        ));
    }
    if claim.fingerprint != fingerprint {
        return Err(format!(
            "{peer} runs job fingerprint {}, {me} runs {}: the spec, the graph, the strategy or the cluster differs",
            abbreviate(&claim.fingerprint),
            abbreviate(fingerprint)
        ));
    }
    Ok(rank)
}

/// Enough of a fingerprint to tell two apart in a log line.
fn abbreviate(fingerprint: &str) -> String {
    const SHOWN: usize = 12;
    if fingerprint.is_empty() {
        return "(none)".to_string();
    }
    let head: String = fingerprint.chars().take(SHOWN).collect();
    if fingerprint.chars().count() > SHOWN { format!("{head}…") } else { head }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, ClusterSource, ClusterSpec, TaskType};

    fn members(index: usize, workers: &[&str]) -> Members {
        let spec = ClusterSpec { worker: workers.iter().map(|s| s.to_string()).collect(), ..ClusterSpec::default() };
        let cluster = Cluster::new(spec, TaskId::new(TaskType::Worker, index), ClusterSource::Flags, None).unwrap();
        Members::from_cluster(&cluster).unwrap()
    }

    const WORKERS: [&str; 2] = ["10.0.0.1:1", "10.0.0.2:1"];

    #[test]
    fn matching_tasks_accept_each_other() {
        let (a, b) = (members(0, &WORKERS), members(1, &WORKERS));
        assert_eq!(check(&b, "fp", &hello(&a, "fp").into()), Ok(0));
        assert_eq!(check(&a, "fp", &reply(&b, "fp").into()), Ok(1));
    }

    #[test]
    fn a_different_fingerprint_names_both_tasks_and_both_fingerprints() {
        let (a, b) = (members(0, &WORKERS), members(1, &WORKERS));
        let error = check(&b, "def0123456789abcdef", &hello(&a, "abc0123456789abcdef").into()).unwrap_err();
        assert_eq!(
            error,
            "worker:0 at 10.0.0.1:1 runs job fingerprint abc012345678…, worker:1 at 10.0.0.2:1 runs def012345678…: \
             the spec, the graph, the strategy or the cluster differs"
        );
    }

    #[test]
    fn different_clusters_are_refused() {
        let a = members(0, &WORKERS);
        let moved = members(1, &["10.0.0.9:1", "10.0.0.2:1"]);
        let error = check(&moved, "fp", &hello(&a, "fp").into()).unwrap_err();
        assert!(error.contains("is worker:0 at 10.0.0.9:1 (rank 0) in worker:1 at 10.0.0.2:1's cluster"), "{error}");
        let bigger = members(1, &["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]);
        let error = check(&bigger, "fp", &hello(&a, "fp").into()).unwrap_err();
        assert!(error.contains("a collective group of 2 tasks, worker:1 at 10.0.0.2:1 one of 3"), "{error}");
    }

    #[test]
    fn members_of_different_epochs_refuse_each_other() {
        let (a, mut b) = (members(0, &WORKERS), members(1, &WORKERS));
        b.epoch = 1;
        let error = check(&b, "fp", &hello(&a, "fp").into()).unwrap_err();
        assert!(
            error.contains(
                "worker:0 at 10.0.0.1:1 is in membership epoch 0 of the job, worker:1 at 10.0.0.2:1 in epoch 1"
            ),
            "{error}"
        );
        assert!(!names_a_member(&b, &hello(&a, "fp").into()), "an old epoch's task must not stop the new group");
        let mut a = a;
        a.epoch = 1;
        assert_eq!(check(&b, "fp", &hello(&a, "fp").into()), Ok(0));
        assert!(names_a_member(&b, &hello(&a, "fp").into()));
    }

    #[test]
    fn a_twin_and_a_stranger_are_refused() {
        let a = members(0, &WORKERS);
        assert!(
            check(&a, "fp", &hello(&a, "fp").into()).unwrap_err().contains("two processes were given the same task")
        );
        let mut stranger: Claim = hello(&a, "fp").into();
        stranger.identity = Some(TaskIdentity { task: "ps:0".into(), address: "p:1".into(), rank: 0 });
        assert!(check(&a, "fp", &stranger).unwrap_err().contains("ps:0 at p:1 is not in the collective group"));
        assert!(!names_a_member(&a, &stranger));
        assert!(names_a_member(&a, &reply(&members(1, &WORKERS), "other").into()));
        stranger.protocol_version = 99;
        assert!(check(&a, "fp", &stranger).unwrap_err().contains("protocol version 99"));
    }
}
