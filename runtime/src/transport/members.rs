//! The collective group as the cluster defines it: the chief and the workers in rank order,
//! and which of them this process is.

use crate::cluster::{Cluster, ClusterSpec, TaskId};
use std::net::{Ipv4Addr, SocketAddr};
use tonic::Status;

use super::ConnectError;
use super::handshake::PROTOCOL_VERSION;
use super::membership::Membership;
use super::proto::JoinRequest;

/// One member of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Member {
    pub task: TaskId,
    /// `host:port` from the cluster spec, canonical (the cluster validator made it so).
    pub address: String,
}

/// Every member, indexed by rank (the order of [`ClusterSpec::collective_rank`]).
///
/// [`ClusterSpec::collective_rank`]: crate::cluster::ClusterSpec::collective_rank
#[derive(Debug, Clone)]
pub(super) struct Members {
    pub members: Vec<Member>,
    /// This process's rank.
    pub me: usize,
    /// The membership epoch: 0 for the group the cluster spec defines, one more at each
    /// re-formation of an elastic job.
    pub epoch: u64,
    /// Every chief and worker of the cluster, members or not, and the members that joined
    /// from outside it: who may ask to join without a token (see [`claimed`]).
    pub cluster: Vec<Member>,
}

impl Members {
    pub fn from_cluster(cluster: &Cluster) -> Result<Members, ConnectError> {
        let members = cluster_members(cluster.spec());
        let me = cluster.rank().ok_or_else(|| ConnectError::NotAMember { task: cluster.to_string() })?;
        if me >= members.len() {
            return Err(ConnectError::NotAMember { task: cluster.to_string() });
        }
        Ok(Members { cluster: members.clone(), members, me, epoch: 0 })
    }

    /// The group of one membership epoch: its tasks in its order, at their addresses (a
    /// member that joined from outside the cluster spec is known by its own).
    pub fn from_membership(cluster: &Cluster, membership: &Membership) -> Result<Members, ConnectError> {
        let members = membership
            .tasks
            .iter()
            .enumerate()
            .map(|(rank, task)| match membership.address(rank) {
                Some(address) if task.task_type.is_collective() => {
                    Ok(Member { task: *task, address: address.to_string() })
                }
                _ => {
                    Err(ConnectError::NotAMember { task: format!("{task} (of membership epoch {})", membership.epoch) })
                }
            })
            .collect::<Result<Vec<Member>, ConnectError>>()?;
        let me = membership.rank_of(&cluster.task()).ok_or_else(|| ConnectError::NotAMember {
            task: format!("{cluster} (in membership epoch {})", membership.epoch),
        })?;
        let known = known(cluster_members(cluster.spec()), membership);
        Ok(Members { members, me, epoch: membership.epoch, cluster: known })
    }

    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Every rank but this process's.
    pub fn peers(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.size()).filter(move |&rank| rank != self.me)
    }

    /// `worker:1 at 10.0.0.2:2222`, the name errors use.
    pub fn describe(&self, rank: usize) -> String {
        match self.members.get(rank) {
            Some(member) => format!("{} at {}", member.task, member.address),
            None => format!("rank {rank}"),
        }
    }

    pub fn me(&self) -> &Member {
        &self.members[self.me]
    }

    /// The socket this process listens on (see [`listen_address`]).
    pub fn listen_address(&self) -> Result<SocketAddr, ConnectError> {
        listen_address(&self.describe(self.me), &self.me().address)
    }
}

/// The cluster's chief and workers with their addresses, in its collective rank order:
/// epoch 0's group, and who may take part in a later one.
pub(super) fn cluster_members(spec: &ClusterSpec) -> Vec<Member> {
    spec.collective_tasks()
        .filter_map(|task| spec.address(&task).map(|address| Member { task, address: address.to_string() }))
        .collect()
}

/// Who may join without a token: the cluster's chief and workers (`seats`), then
/// `membership`'s members from outside them.
pub(super) fn known(mut seats: Vec<Member>, membership: &Membership) -> Vec<Member> {
    for (task, address) in membership.tasks.iter().zip(&membership.addresses) {
        let member = Member { task: *task, address: address.clone() };
        if !seats.contains(&member) {
            seats.push(member);
        }
    }
    seats
}

/// Why a join or an announcement from `task` is refused when its fingerprint differs.
pub(super) fn another_job(task: TaskId) -> String {
    format!(
        "{task} runs another job (its fingerprint differs: another spec, other --set overrides or \
         min_workers/max_workers, or another build)"
    )
}

/// A host name is at most 253 characters, a port 5 and the colon 1 (IPv6 brackets fit).
const MAX_ADDRESS_CHARS: usize = 261;

/// Who a join or an announcement comes from, or why it must be refused: another build, no
/// task named, or a task that is no chief or worker.
///
/// A task of `known` (the cluster's chief and workers, and the running group's members) is
/// taken as it names itself. Another one (a replacement machine at a new address, a new
/// worker of a job with room up to `max_workers`) only when `open`: the job has a cluster
/// token, which the interceptor checked before this, so a caller is one of its operator's
/// processes and not whoever can reach the port.
pub(super) fn claimed(known: &[Member], request: &JoinRequest, open: bool) -> Result<Member, Status> {
    if request.protocol_version != PROTOCOL_VERSION {
        return Err(Status::failed_precondition(format!(
            "the caller speaks collective protocol version {}, this task version {PROTOCOL_VERSION}: the tasks run \
             different builds of the engine",
            request.protocol_version
        )));
    }
    let id = request.sender.as_ref().ok_or_else(|| Status::invalid_argument("the request names no task"))?;
    let task: TaskId = id.task.parse().map_err(|e| Status::invalid_argument(format!("not a task: {e}")))?;
    let member = Member { task, address: id.address.clone() };
    if known.contains(&member) {
        return Ok(member);
    }
    if !open {
        return Err(Status::failed_precondition(format!(
            "{} at {} is not a chief or worker of this job's cluster (a task from outside it may join an elastic \
             job only when the job has a cluster token: set ENGINE_CLUSTER_TOKEN or --token-file on every task)",
            id.task, id.address
        )));
    }
    if !task.task_type.is_collective() {
        return Err(Status::failed_precondition(format!(
            "{task} at {} is no chief or worker: it cannot train",
            id.address
        )));
    }
    let well_formed = |(host, port): (&str, &str)| !host.is_empty() && port.parse::<u16>().is_ok();
    if id.address.len() > MAX_ADDRESS_CHARS || !id.address.rsplit_once(':').is_some_and(well_formed) {
        return Err(Status::invalid_argument(format!("{task} names no host:port to reach it at ({})", id.address)));
    }
    Ok(member)
}

/// The socket a task at `address` listens on. An IP address in the spec is bound as written
/// (tests and single-machine runs stay on loopback); a host name is bound on every
/// interface, as TensorFlow's servers do, because the name may resolve to an address the
/// machine does not own (a Kubernetes service, a NAT).
pub(super) fn listen_address(task: &str, address: &str) -> Result<SocketAddr, ConnectError> {
    if let Ok(socket) = address.parse::<SocketAddr>() {
        return Ok(socket);
    }
    let port = address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse::<u16>().ok())
        .ok_or_else(|| ConnectError::Listen { task: task.to_string(), reason: "the address has no port".into() })?;
    Ok(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))
}

/// The host part of `host:port`, without IPv6 brackets: what TLS checks the certificate
/// against.
pub(super) fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterSource, ClusterSpec, TaskType};

    fn cluster(task: TaskId) -> Cluster {
        let spec = ClusterSpec {
            chief: vec!["10.0.0.1:2222".into()],
            worker: vec!["w1:2222".into(), "[::1]:2223".into()],
            ps: vec!["p:1".into()],
            ..ClusterSpec::default()
        };
        Cluster::new(spec, task, ClusterSource::Flags, None).unwrap()
    }

    #[test]
    fn members_are_ranked_chief_first_and_named_with_their_address() {
        let members = Members::from_cluster(&cluster(TaskId::new(TaskType::Worker, 0))).unwrap();
        assert_eq!(members.size(), 3);
        assert_eq!(members.me, 1);
        assert_eq!(members.describe(0), "chief:0 at 10.0.0.1:2222");
        assert_eq!(members.describe(2), "worker:1 at [::1]:2223");
        assert_eq!(members.peers().collect::<Vec<_>>(), [0, 2]);
    }

    #[test]
    fn ip_addresses_are_bound_as_written_and_names_on_every_interface() {
        let chief = Members::from_cluster(&cluster(TaskId::new(TaskType::Chief, 0))).unwrap();
        assert_eq!(chief.listen_address().unwrap(), "10.0.0.1:2222".parse().unwrap());
        let named = Members::from_cluster(&cluster(TaskId::new(TaskType::Worker, 0))).unwrap();
        assert_eq!(named.listen_address().unwrap(), "0.0.0.0:2222".parse().unwrap());
        let v6 = Members::from_cluster(&cluster(TaskId::new(TaskType::Worker, 1))).unwrap();
        assert_eq!(v6.listen_address().unwrap(), "[::1]:2223".parse().unwrap());
    }

    #[test]
    fn a_ps_task_is_not_a_member() {
        let error = Members::from_cluster(&cluster(TaskId::new(TaskType::Ps, 0))).unwrap_err();
        assert!(error.to_string().contains("ps:0 at p:1 is not in the collective group"), "{error}");
    }

    #[test]
    fn hosts_lose_their_port_and_brackets() {
        assert_eq!(host_of("localhost:1"), "localhost");
        assert_eq!(host_of("[::1]:2"), "::1");
        assert_eq!(host_of("10.0.0.1:3"), "10.0.0.1");
    }
}
