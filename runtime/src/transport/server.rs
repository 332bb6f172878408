//! The gRPC service each task serves: peers' handshakes, and their streams of frames, which
//! it files in the mailbox.

use super::handshake::{self, Claim};
use super::members::{self, Members};
use super::proto::collective_service_server::CollectiveService;
use super::proto::{
    AnnounceReply, ExchangeClosed, Frame, HelloReply, HelloRequest, JoinRequest, TaskIdentity, frame::Body,
};
use super::state::Shared;
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};

/// The metadata key carrying the sender's rank on an `Exchange` call.
pub(super) const RANK_HEADER: &str = "x-engine-rank";

/// The most tasks waiting to join at once: as many workers as a job may name. The round
/// refuses those past `max_workers`; this bounds what a caller with the token can make a
/// member remember before the round.
const MAX_JOINERS: usize = 1024;

/// Abort reasons from peers are shown in errors; a peer must not be able to flood them.
const MAX_REASON_CHARS: usize = 2000;

pub(super) struct Service {
    pub shared: Arc<Shared>,
    pub members: Arc<Members>,
    pub fingerprint: Arc<str>,
    /// The job has a cluster token: a task from outside the cluster spec may ask to join.
    pub open: bool,
}

impl Service {
    /// Which peer an `Exchange` call comes from, and whether it may open one.
    fn admit(&self, request: &Request<Streaming<Frame>>) -> Result<usize, Status> {
        let rank = request
            .metadata()
            .get(RANK_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.parse::<usize>().ok())
            .filter(|&rank| rank < self.members.size() && rank != self.members.me)
            .ok_or_else(|| Status::invalid_argument(format!("an exchange call needs a valid {RANK_HEADER}")))?;
        let mut state = self.shared.lock();
        let peer = &mut state.peers[rank];
        if !peer.greeted {
            return Err(Status::failed_precondition(format!(
                "{} opened a stream without a handshake",
                self.members.describe(rank)
            )));
        }
        if peer.inbound_opened {
            return Err(Status::already_exists(format!(
                "{} already had a stream to {}: a restarted task cannot rejoin a running group",
                self.members.describe(rank),
                self.members.describe(self.members.me)
            )));
        }
        peer.inbound_opened = true;
        drop(state);
        self.shared.notify();
        Ok(rank)
    }
}

#[tonic::async_trait]
impl CollectiveService for Service {
    async fn announce(&self, request: Request<JoinRequest>) -> Result<Response<AnnounceReply>, Status> {
        let caller = members::claimed(&self.members.cluster, request.get_ref(), self.open)?;
        let task = caller.task;
        if request.get_ref().fingerprint != *self.fingerprint {
            return Err(Status::failed_precondition(members::another_job(task)));
        }
        // Two processes cannot be one task. A task at a new address under a member's name
        // is a replacement whose old process the group has not seen go yet (it asks again
        // until the group re-forms without it), or a twin (its wait times out naming this).
        if let Some(member) = self.members.members.iter().find(|m| m.task == task && m.address != caller.address) {
            return Err(Status::already_exists(format!(
                "{task} is a member of the running group at {}, not at {}: if that process is gone, the group \
                 re-forms without it once it sees it go; if not, start the new task with another index",
                member.address, caller.address
            )));
        }
        // A member is not joining: the group is still forming (its process connects as
        // usual), or its earlier process is still in the group, which will see it go.
        let member = self.members.members.iter().any(|m| m.task == task);
        let accepted = self.members.me == 0 && !member;
        let mut state = self.shared.lock();
        let formed = state.formed;
        if accepted && !state.joiners.contains(&task) {
            if state.joiners.len() >= MAX_JOINERS {
                return Err(Status::resource_exhausted(format!(
                    "{task} cannot join: {MAX_JOINERS} tasks already wait to join membership epoch {}",
                    self.members.epoch
                )));
            }
            log::info!(
                "{task} asks to join membership epoch {}: the group re-forms at the next step",
                self.members.epoch
            );
            state.joiners.push(task);
        }
        drop(state);
        let members = self
            .members
            .members
            .iter()
            .enumerate()
            .map(|(rank, m)| TaskIdentity { task: m.task.to_string(), address: m.address.clone(), rank: rank as u32 })
            .collect();
        Ok(Response::new(AnnounceReply { epoch: self.members.epoch, members, accepted, formed }))
    }

    async fn hello(&self, request: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let claim = Claim::from(request.into_inner());
        match handshake::check(&self.members, &self.fingerprint, &claim) {
            Ok(rank) => {
                self.shared.lock().peers[rank].greeted = true;
                self.shared.notify();
                Ok(Response::new(handshake::reply(&self.members, &self.fingerprint)))
            }
            Err(reason) => {
                let mut state = self.shared.lock();
                if handshake::names_a_member(&self.members, &claim) {
                    // A peer of this group that must not train with it: this task's own
                    // `connect` fails too, rather than wait for a peer it will never accept.
                    if state.refused.is_none() {
                        state.refused = Some((handshake::claimed_name(&claim), reason.clone()));
                    }
                } else {
                    // A stranger (a leftover process of another job on a reused port, say)
                    // must not stop this group; it only explains a timeout.
                    state.note_refusal(format!("{} was refused: {reason}", handshake::claimed_name(&claim)));
                }
                drop(state);
                self.shared.notify();
                Err(Status::failed_precondition(reason))
            }
        }
    }

    async fn exchange(&self, request: Request<Streaming<Frame>>) -> Result<Response<ExchangeClosed>, Status> {
        let rank = self.admit(&request)?;
        let peer = self.members.describe(rank);
        let mut frames = request.into_inner();
        loop {
            match frames.message().await {
                Ok(Some(Frame { body: Some(Body::Segment(segment)) })) => {
                    let delivered = {
                        let mut state = self.shared.lock();
                        // Once the group is aborted nothing reads the mailbox any more, and a
                        // peer still sending the failed operation's segments is not broken.
                        if state.aborted.is_some() { Ok(()) } else { state.mailbox.deliver(rank, segment) }
                    };
                    match delivered {
                        Ok(()) => self.shared.notify(),
                        Err(why) => {
                            self.shared.lose(rank, format!("{peer} sent an invalid message: {why}"));
                            return Err(Status::invalid_argument(why));
                        }
                    }
                }
                Ok(Some(Frame { body: Some(Body::Abort(abort)) })) => {
                    let reason: String = abort.reason.chars().take(MAX_REASON_CHARS).collect();
                    self.shared.abort(format!("{peer} aborted the group: {reason}"), abort.retryable);
                }
                Ok(Some(Frame { body: None })) => {
                    self.shared.lose(rank, format!("{peer} sent an empty frame"));
                    return Err(Status::invalid_argument("an empty frame"));
                }
                Ok(None) => {
                    self.shared.leave(rank);
                    return Ok(Response::new(ExchangeClosed {}));
                }
                Err(status) => {
                    self.shared.lose(rank, format!("the connection from {peer} was lost ({})", status.message()));
                    return Err(status);
                }
            }
        }
    }
}
