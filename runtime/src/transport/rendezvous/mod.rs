//! The rendezvous of an elastic `multi_worker` job: after a member is lost, the survivors
//! agree on the next membership epoch without restarting their processes.
//!
//! How it works (torchrun's dynamic rendezvous, without a separate store):
//!
//! - **Who coordinates.** The lowest-ranked member of the last epoch that answers. Each
//!   survivor asks the members ranked before it, in order, for up to the probe interval
//!   each (a member still closing its old group answers "unimplemented" until it opens the
//!   round); a member it saw lost is skipped at once. A survivor that no lower rank answers
//!   coordinates itself. So when the chief is lost, the lowest-ranked worker holds the
//!   round and, ranked first in the new epoch, takes over the chief's duties.
//! - **The round.** The coordinator serves it on its own task address (its old group is
//!   gone by then) and closes it when every member it expects has joined, when
//!   `max_workers` have, or when at least `min_workers` have and nobody new came for the
//!   last call; below `min_workers` at the timeout, every member gets a named error.
//! - **The answer.** The new epoch (one past the highest any member trained in), its
//!   members in the cluster's rank order, and the member holding the most advanced state,
//!   which the others continue from.
//!
//! The caller then connects the new group with
//! [`NetworkGroup::connect_epoch`](super::NetworkGroup::connect_epoch), whose handshake
//! refuses peers of any other epoch.

mod coordinator;
mod round;
mod service;

#[cfg(test)]
mod tests;

pub use round::RoundRules;

use super::ConnectError;
use super::auth::{AttachToken, token_value};
use super::config::NetworkConfig;
use super::handshake::PROTOCOL_VERSION;
use super::link::error_chain;
use super::membership::Membership;
use super::proto::rendezvous_service_client::RendezvousServiceClient;
use super::proto::{JoinReply, JoinRequest, TaskIdentity};
use crate::cluster::TaskId;
use coordinator::{Coordinator, Opening};
use round::Candidate;
use service::Seat;
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::transport::Endpoint;

/// What a task of an elastic job needs to re-form its group.
#[derive(Debug, Clone)]
pub struct ElasticConfig {
    /// The group's configuration; its fingerprint identifies the job across epochs.
    pub network: NetworkConfig,
    pub rules: RoundRules,
    /// How long a survivor waits for a lower-ranked member to open the round before trying
    /// the next one (or coordinating): longer than a member takes to notice the failure and
    /// close its old group.
    pub probe: Duration,
}

/// Why asking one member failed.
enum Asked {
    Answered(JoinReply),
    /// It answered and refused: asking another member would not help.
    Refused(ConnectError),
    /// It did not open a round in time.
    NoAnswer(String),
}

/// Joins the next membership epoch after `previous`, having completed `step`. `lost` are
/// the members this task saw go (their connections broke); the round does not wait for
/// them. The old group must have been dropped: the coordinator serves on its address.
pub fn rendezvous(
    config: &ElasticConfig,
    previous: &Membership,
    step: u64,
    lost: &[TaskId],
) -> Result<Membership, ConnectError> {
    let cluster = &config.network.cluster;
    let me = cluster.task();
    let name = cluster.to_string();
    let spec = cluster.spec();
    let seats: Vec<Seat> = spec
        .collective_tasks()
        .filter_map(|task| spec.address(&task).map(|a| Seat { task, address: a.to_string() }))
        .collect();
    let cluster_rank =
        seats.iter().position(|s| s.task == me).ok_or(ConnectError::NotAMember { task: name.clone() })?;
    let my_rank = previous.rank_of(&me).ok_or_else(|| ConnectError::NotAMember {
        task: format!("{name} (it was not in membership epoch {})", previous.epoch),
    })?;
    let token = match &config.network.token {
        Some(token) => Some(token_value(token).ok_or_else(|| ConnectError::InvalidToken { task: name.clone() })?),
        None => None,
    };
    let address_of = |task: &TaskId| seats.iter().find(|s| s.task == *task).map(|s| s.address.clone());
    let my_address = address_of(&me).unwrap_or_default();
    let identity = TaskIdentity { task: me.to_string(), address: my_address.clone(), rank: my_rank as u32 };
    let request = JoinRequest {
        protocol_version: PROTOCOL_VERSION,
        sender: Some(identity),
        fingerprint: config.network.fingerprint.clone(),
        epoch: previous.epoch,
        step,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ConnectError::Runtime { task: name.clone(), reason: e.to_string() })?;
    let mut gone: Vec<TaskId> = lost.to_vec();
    for task in previous.tasks.iter().take(my_rank) {
        if gone.contains(task) {
            continue;
        }
        let Some(address) = address_of(task) else { continue };
        let asked = runtime.block_on(ask(&address, &request, token.clone(), config));
        match asked {
            Asked::Answered(reply) => return membership_of(&name, &reply),
            Asked::Refused(error) => return Err(error),
            Asked::NoAnswer(why) => {
                log::warn!("{name}: {task} at {address} holds no rendezvous ({why}); trying the next member");
                gone.push(*task);
            }
        }
    }
    drop(runtime);
    let expected = previous.tasks.iter().filter(|t| !gone.contains(t)).count();
    log::info!("{name}: holding the rendezvous after {previous} (expecting {expected} member(s))");
    let coordinator = Coordinator::open(Opening {
        me: Candidate { task: me, cluster_rank, epoch: previous.epoch, step },
        my_address: &my_address,
        seats,
        fingerprint: &config.network.fingerprint,
        token,
        rules: config.rules,
        expected,
        bind_until: Instant::now() + config.probe,
    })?;
    coordinator.close()
}

/// Asks the member at `address` to let this task into its round, retrying until the
/// probe interval passes while it does not hold one yet.
async fn ask(
    address: &str,
    request: &JoinRequest,
    token: Option<tonic::metadata::AsciiMetadataValue>,
    config: &ElasticConfig,
) -> Asked {
    const RETRY: Duration = Duration::from_millis(50);
    let scheme_address = format!("http://{address}");
    let endpoint = match Endpoint::from_shared(scheme_address) {
        Ok(endpoint) => endpoint.connect_timeout(Duration::from_secs(1)).tcp_nodelay(true),
        Err(e) => return Asked::NoAnswer(format!("not a valid address: {e}")),
    };
    // Once admitted, a join waits for the round to close: up to the round's timeout and
    // its last call.
    let answer_within = config.rules.timeout + config.rules.last_call + Duration::from_secs(5);
    let until = Instant::now() + config.probe;
    let mut last = "no answer".to_string();
    while Instant::now() < until {
        let channel = match endpoint.connect().await {
            Ok(channel) => channel,
            Err(e) => {
                last = error_chain(&e);
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let mut client = RendezvousServiceClient::with_interceptor(channel, AttachToken::new(token.clone()));
        match tokio::time::timeout(answer_within, client.join(request.clone())).await {
            Err(_) => return Asked::NoAnswer(format!("its round did not close within {answer_within:?}")),
            Ok(Ok(reply)) => return Asked::Answered(reply.into_inner()),
            Ok(Err(status)) => match status.code() {
                // Still serving its old group, or shutting it down: not a coordinator yet.
                Code::Unimplemented | Code::Unavailable | Code::Unknown | Code::Cancelled => {
                    last = format!("{:?}: {}", status.code(), status.message());
                    tokio::time::sleep(RETRY).await;
                }
                Code::Aborted => {
                    let task = request.sender.as_ref().map(|s| s.task.clone()).unwrap_or_default();
                    return Asked::Refused(ConnectError::BelowMinimum { task, reason: status.message().to_string() });
                }
                _ => {
                    let task = request.sender.as_ref().map(|s| s.task.clone()).unwrap_or_default();
                    return Asked::Refused(ConnectError::Refused {
                        task,
                        peer: address.to_string(),
                        reason: format!("the rendezvous refused it: {}", status.message()),
                    });
                }
            },
        }
    }
    Asked::NoAnswer(last)
}

fn membership_of(name: &str, reply: &JoinReply) -> Result<Membership, ConnectError> {
    let tasks =
        reply.members.iter().map(|m| m.task.parse::<TaskId>()).collect::<Result<Vec<TaskId>, _>>().map_err(|e| {
            ConnectError::Refused {
                task: name.to_string(),
                peer: "the rendezvous".into(),
                reason: format!("it answered with an invalid member: {e}"),
            }
        })?;
    let holder = reply.holder as usize;
    if holder >= tasks.len() {
        return Err(ConnectError::Refused {
            task: name.to_string(),
            peer: "the rendezvous".into(),
            reason: format!("it named member {holder} of {} as the state's holder", tasks.len()),
        });
    }
    Ok(Membership { epoch: reply.epoch, tasks, holder, step: reply.step })
}
