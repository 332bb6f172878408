//! The rendezvous of an elastic `multi_worker` job: after a member is lost, the survivors
//! agree on the next membership epoch without restarting their processes.
//!
//! How it works (torchrun's dynamic rendezvous, without a separate store):
//!
//! - **Who coordinates.** The lowest-ranked member of the last epoch that answers. Each
//!   survivor asks the members ranked before it, in order; a member it saw lost is skipped
//!   at once, and the member at rank `r` is given `r + 1` probe intervals to open its
//!   round (a member still closing its old group answers "unimplemented" until it does),
//!   since it may itself first wait one interval on each of the `r` members before it. A
//!   survivor that no lower rank answers coordinates itself. So when the chief is lost,
//!   the lowest-ranked worker holds the round and, ranked first in the new epoch, takes
//!   over the chief's duties.
//! - **The round.** The coordinator serves it on its own task address (its old group is
//!   gone by then) and closes it when every member it expects has joined, when
//!   `max_workers` have, or when at least `min_workers` have and nobody new came for the
//!   last call; below `min_workers` at the timeout, every member gets a named error.
//! - **The answer.** The new epoch (one past the highest any member trained in), its
//!   members (the last epoch's in the cluster's rank order, then the joiners), and the
//!   member holding the most advanced state, which the others continue from.
//! - **Joining.** A worker starting up while the job runs without it (new, or started again
//!   after it was lost) announces itself to the running group's first member
//!   ([`find_running_job`]), which has every task end the next step and re-form; the worker
//!   joins that round ([`join_running`]) and takes the holder's state, as survivors do.
//!
//! The caller then connects the new group with
//! [`NetworkGroup::connect_epoch`](super::NetworkGroup::connect_epoch), whose handshake
//! refuses peers of any other epoch.

mod caller;
mod coordinator;
mod round;
mod service;

#[cfg(test)]
mod tests;

pub use round::RoundRules;

use super::ConnectError;
use super::auth::AttachToken;
use super::config::NetworkConfig;
use super::link::error_chain;
use super::members::known;
use super::membership::Membership;
use super::proto::collective_service_client::CollectiveServiceClient;
use super::proto::rendezvous_service_client::RendezvousServiceClient;
use super::proto::{AnnounceReply, JoinReply, JoinRequest};
use crate::cluster::TaskId;
use caller::Caller;
use coordinator::{Coordinator, Opening};
use round::Candidate;
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
    /// the next one (or coordinating), per rank: the member at rank `r` gets `r + 1` of
    /// these. Longer than a member takes to notice the failure and close its old group, and
    /// well below `rules.timeout`: a survivor that did not see a lower-ranked member go
    /// probes it this long before reaching the round, which waits `rules.timeout` from its
    /// opening.
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
/// them. `joining` tasks asked to join (see [`find_running_job`]); the coordinator expects
/// them too. The old group must have been dropped: the coordinator serves on its address.
pub fn rendezvous(
    config: &ElasticConfig,
    previous: &Membership,
    step: u64,
    lost: &[TaskId],
    joining: usize,
) -> Result<Membership, ConnectError> {
    let caller = Caller::of(config)?;
    let name = &caller.name;
    let my_rank = previous.rank_of(&caller.me).ok_or_else(|| ConnectError::NotAMember {
        task: format!("{name} (it was not in membership epoch {})", previous.epoch),
    })?;
    let request = caller.request(config, previous.epoch, my_rank, step, false);
    let mut gone: Vec<TaskId> = lost.to_vec();
    for (rank, (task, address)) in previous.tasks.iter().zip(&previous.addresses).take(my_rank).enumerate() {
        if gone.contains(task) {
            continue;
        }
        // The member at `rank` may itself be probing the `rank` members before it, one
        // probe interval each, before it opens the round: waiting a single interval for it,
        // a survivor that saw a lower member go gave up on one that had not, moments
        // before that one opened, and both held a round of one (the CI run of 56bdfd2).
        let window = config.probe.saturating_mul(u32::try_from(rank + 1).unwrap_or(u32::MAX));
        match caller.runtime.block_on(ask(address, &request, caller.token.clone(), config, window)) {
            Asked::Answered(reply) => return membership_of(name, &reply),
            Asked::Refused(error) => return Err(error),
            Asked::NoAnswer(why) => {
                log::warn!("{name}: {task} at {address} holds no rendezvous ({why}); trying the next member");
                gone.push(*task);
            }
        }
    }
    let expected = previous.tasks.iter().filter(|t| !gone.contains(t)).count() + joining;
    log::info!("{name}: holding the rendezvous after {previous} (expecting {expected} member(s))");
    let coordinator = Coordinator::open(Opening {
        me: Candidate {
            task: caller.me,
            address: caller.address.clone(),
            order: my_rank,
            epoch: previous.epoch,
            step,
            joining: false,
        },
        my_address: &caller.address,
        known: known(caller.seats.clone(), previous),
        fingerprint: &config.network.fingerprint,
        token: caller.token.clone(),
        rules: config.rules,
        expected,
        bind_until: Instant::now() + config.probe,
    })?;
    coordinator.close()
}

/// For a worker of an elastic job starting up: the running group this task is not part of
/// (the job went on without it, or it is new), after asking its first member to take this
/// task in at the next step; `None` when no group runs without it (the job is starting:
/// connect as usual).
pub fn find_running_job(config: &ElasticConfig) -> Result<Option<Membership>, ConnectError> {
    let caller = Caller::of(config)?;
    let (me, name, seats, token) = (caller.me, &caller.name, &caller.seats, &caller.token);
    let request = caller.request(config, 0, 0, 0, true);
    let deadline = Instant::now() + config.rules.timeout;
    caller.runtime.block_on(async {
        loop {
            // Whether some member is re-forming, or still counts this task's earlier process
            // in: then the running group is about to change, and this asks again.
            let mut unsettled = None;
            for seat in seats.iter().filter(|s| s.task != me) {
                let reply = match announce(&seat.address, &request, token.clone()).await? {
                    Announced::NotUp => continue,
                    Announced::Busy(why) => {
                        unsettled = Some(format!("{} {why}", seat.task));
                        continue;
                    }
                    Announced::Reply(reply) => reply,
                };
                let running = running_membership(name, &reply)?;
                if let Some(rank) = running.rank_of(&me) {
                    let at = running.address(rank).unwrap_or_default();
                    if at != caller.address {
                        // A replacement at a new address, before the group saw the old
                        // process go; or a twin, which the timeout names.
                        unsettled = Some(format!("{} counts {me} in {running}, at {at}", seat.task));
                        continue;
                    }
                    if !reply.formed {
                        // The job is starting: connect as usual.
                        return Ok(None);
                    }
                    unsettled = Some(format!("{} still counts {me} in {running}", seat.task));
                    continue;
                }
                let reply = match (reply.accepted, running.address(0)) {
                    (true, _) => reply,
                    (false, Some(first)) => match announce(first, &request, token.clone()).await? {
                        Announced::Reply(reply) if reply.accepted => reply,
                        _ => continue,
                    },
                    (false, None) => continue,
                };
                return Ok(Some(running_membership(name, &reply)?));
            }
            let Some(why) = unsettled else { return Ok(None) };
            if Instant::now() >= deadline {
                return Err(ConnectError::Timeout {
                    task: name.to_string(),
                    timeout: config.rules.timeout,
                    missing: format!("a running group that does not count this task ({why})"),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Joins the running group's next epoch (after [`find_running_job`]): waits for its first
/// member to hold the rendezvous at the next step. The state comes from the holder.
pub fn join_running(config: &ElasticConfig, running: &Membership) -> Result<Membership, ConnectError> {
    let caller = Caller::of(config)?;
    let coordinator = running.address(0).ok_or_else(|| ConnectError::NotAMember { task: caller.name.clone() })?;
    let request = caller.request(config, running.epoch, 0, 0, true);
    // The round opens after the group's next step: wait as long as a round may take.
    let waiting = ElasticConfig { probe: config.rules.timeout, ..config.clone() };
    match caller.runtime.block_on(ask(coordinator, &request, caller.token.clone(), &waiting, waiting.probe)) {
        Asked::Answered(reply) => membership_of(&caller.name, &reply),
        Asked::Refused(error) => Err(error),
        Asked::NoAnswer(why) => Err(ConnectError::Timeout {
            task: caller.name.clone(),
            timeout: config.rules.timeout,
            missing: format!("the running group's rendezvous at {coordinator} ({why})"),
        }),
    }
}

/// What announcing to one task found.
enum Announced {
    /// Nothing listens there.
    NotUp,
    /// Something answers but no running group (a rendezvous in progress, a task shutting
    /// down), or it did not answer in time.
    Busy(String),
    Reply(AnnounceReply),
}

/// One announcement to the member at `address`.
async fn announce(
    address: &str,
    request: &JoinRequest,
    token: Option<tonic::metadata::AsciiMetadataValue>,
) -> Result<Announced, ConnectError> {
    let Ok(endpoint) = Endpoint::from_shared(format!("http://{address}")) else { return Ok(Announced::NotUp) };
    let Ok(channel) = endpoint.connect_timeout(Duration::from_secs(1)).connect().await else {
        return Ok(Announced::NotUp);
    };
    let mut client = CollectiveServiceClient::with_interceptor(channel, AttachToken::new(token));
    match tokio::time::timeout(Duration::from_secs(5), client.announce(request.clone())).await {
        Ok(Ok(reply)) => Ok(Announced::Reply(reply.into_inner())),
        Ok(Err(status)) if matches!(status.code(), Code::FailedPrecondition | Code::Unauthenticated) => {
            Err(ConnectError::Refused {
                task: request.sender.as_ref().map(|s| s.task.clone()).unwrap_or_default(),
                peer: address.to_string(),
                reason: status.message().to_string(),
            })
        }
        // A member of that name at another address: the old process of a replacement (the
        // group re-forms without it once it sees it go), or a live twin.
        Ok(Err(status)) if status.code() == Code::AlreadyExists => Ok(Announced::Busy(status.message().to_string())),
        Ok(Err(status)) => Ok(Announced::Busy(format!("answers {:?}: {}", status.code(), status.message()))),
        Err(_) => Ok(Announced::Busy("does not answer".into())),
    }
}

fn running_membership(name: &str, reply: &AnnounceReply) -> Result<Membership, ConnectError> {
    membership_of(name, &JoinReply { epoch: reply.epoch, members: reply.members.clone(), holder: 0, step: 0 })
}

/// Asks the member at `address` to let this task into its round, retrying until `window`
/// passes while it does not hold one yet.
async fn ask(
    address: &str,
    request: &JoinRequest,
    token: Option<tonic::metadata::AsciiMetadataValue>,
    config: &ElasticConfig,
    window: Duration,
) -> Asked {
    const RETRY: Duration = Duration::from_millis(50);
    let scheme_address = format!("http://{address}");
    // A member that hangs (its socket open and nothing answering: a stopped process, a
    // wedged host, a runtime shutting down) accepts the connection and never answers the
    // join, which would hold this task for the round's whole timeout, past the round the
    // next member opens. HTTP/2 pings give it up within the probe interval; a member
    // holding a round answers them while the join waits.
    let ping = (config.probe / 2).max(Duration::from_millis(200));
    let endpoint = match Endpoint::from_shared(scheme_address) {
        Ok(endpoint) => endpoint
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(ping)
            .keep_alive_timeout(ping)
            .keep_alive_while_idle(true),
        Err(e) => return Asked::NoAnswer(format!("not a valid address: {e}")),
    };
    // Once admitted, a join waits for the round to close: up to the round's timeout and
    // its last call.
    let answer_within = config.rules.timeout + config.rules.last_call + Duration::from_secs(5);
    let until = Instant::now() + window;
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
                Code::Aborted => {
                    let task = request.sender.as_ref().map(|s| s.task.clone()).unwrap_or_default();
                    return Asked::Refused(ConnectError::BelowMinimum { task, reason: status.message().to_string() });
                }
                Code::FailedPrecondition
                | Code::Unauthenticated
                | Code::PermissionDenied
                | Code::ResourceExhausted
                | Code::InvalidArgument => {
                    let task = request.sender.as_ref().map(|s| s.task.clone()).unwrap_or_default();
                    return Asked::Refused(ConnectError::Refused {
                        task,
                        peer: address.to_string(),
                        reason: format!("the rendezvous refused it: {}", status.message()),
                    });
                }
                // Still serving its old group, shutting it down, or gone mid-call: not a
                // coordinator (yet).
                _ => {
                    last = format!("{:?}: {}", status.code(), status.message());
                    tokio::time::sleep(RETRY).await;
                }
            },
        }
    }
    Asked::NoAnswer(last)
}

fn membership_of(name: &str, reply: &JoinReply) -> Result<Membership, ConnectError> {
    let addresses = reply.members.iter().map(|m| m.address.clone()).collect();
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
    Ok(Membership { epoch: reply.epoch, tasks, addresses, holder, step: reply.step })
}
