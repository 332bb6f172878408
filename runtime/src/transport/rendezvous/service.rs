//! The coordinator's side of a rendezvous: admits members of this job and cluster into the
//! round, and answers each when the round closes.

use super::super::members::{Member, another_job, claimed};
use super::super::proto::rendezvous_service_server::RendezvousService;
use super::super::proto::{JoinReply, JoinRequest, TaskIdentity};
use super::round::{Candidate, Outcome, Round};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// How often a waiting join re-checks the round (a rendezvous is not latency-critical).
const POLL: Duration = Duration::from_millis(20);

pub(super) struct Service {
    pub round: Arc<Mutex<Round>>,
    /// The cluster's chief and workers in its rank order, then the last epoch's members
    /// from outside it: who may join without a token.
    pub known: Arc<Vec<Member>>,
    /// The job has a cluster token: a task from outside the cluster may join (see
    /// [`claimed`]).
    pub open: bool,
    pub fingerprint: Arc<str>,
    /// Joins answered, so that the coordinator keeps serving until every joiner has its
    /// answer.
    pub answered: Arc<AtomicUsize>,
}

pub(super) fn lock(round: &Mutex<Round>) -> MutexGuard<'_, Round> {
    round.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Service {
    /// The candidate a request describes, or why it may not join this job.
    fn admit(&self, request: &JoinRequest) -> Result<Candidate, String> {
        let Member { task, address } =
            claimed(&self.known, request, self.open).map_err(|status| status.message().to_string())?;
        if request.fingerprint != *self.fingerprint {
            return Err(another_job(task));
        }
        let order = match (request.joining, request.sender.as_ref()) {
            (false, Some(id)) => id.rank as usize,
            _ => self.known.iter().position(|m| m.task == task && m.address == address).unwrap_or(self.known.len()),
        };
        Ok(Candidate { task, address, order, epoch: request.epoch, step: request.step, joining: request.joining })
    }

    fn reply(membership: &super::super::membership::Membership) -> JoinReply {
        let members = membership
            .tasks
            .iter()
            .zip(&membership.addresses)
            .enumerate()
            .map(|(rank, (task, address))| TaskIdentity {
                task: task.to_string(),
                address: address.clone(),
                rank: rank as u32,
            })
            .collect();
        JoinReply { epoch: membership.epoch, members, holder: membership.holder as u32, step: membership.step }
    }
}

#[tonic::async_trait]
impl RendezvousService for Service {
    async fn join(&self, request: Request<JoinRequest>) -> Result<Response<JoinReply>, Status> {
        let candidate = self.admit(request.get_ref()).map_err(Status::failed_precondition)?;
        lock(&self.round).join(candidate, Instant::now()).map_err(Status::resource_exhausted)?;
        loop {
            let outcome = lock(&self.round).poll(Instant::now()).cloned();
            if let Some(outcome) = outcome {
                self.answered.fetch_add(1, Ordering::SeqCst);
                return match outcome {
                    Outcome::Formed(membership) => Ok(Response::new(Self::reply(&membership))),
                    Outcome::Failed(why) => Err(Status::aborted(why)),
                };
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
