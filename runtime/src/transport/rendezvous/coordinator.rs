//! Holding a rendezvous round: this task serves the round on its own address until it
//! closes and every joiner has its answer, then gives the address back for the new group.

use super::super::ConnectError;
use super::super::auth::RequireToken;
use super::super::listen;
use super::super::members::Member;
use super::super::members::listen_address;
use super::super::membership::Membership;
use super::super::proto::rendezvous_service_server::RendezvousServiceServer;
use super::round::{Candidate, Outcome, Round, RoundRules};
use super::service::{Service, lock};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// How long the closed round keeps serving for joiners still collecting their answer.
const ANSWER_GRACE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);

pub(super) struct Coordinator {
    runtime: Runtime,
    round: Arc<Mutex<Round>>,
    answered: Arc<AtomicUsize>,
    task: String,
}

pub(super) struct Opening<'a> {
    pub me: Candidate,
    pub my_address: &'a str,
    /// Who may join without a token (see [`Service::known`]).
    pub known: Vec<Member>,
    pub fingerprint: &'a str,
    pub token: Option<AsciiMetadataValue>,
    pub rules: RoundRules,
    pub expected: usize,
    /// How long binding may wait for the old group's server to let the address go.
    pub bind_until: Instant,
}

impl Coordinator {
    /// Opens the round with this task in it and starts serving it.
    pub fn open(opening: Opening<'_>) -> Result<Coordinator, ConnectError> {
        let task = format!("{} at {}", opening.me.task, opening.my_address);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("engine-rendezvous")
            .enable_all()
            .build()
            .map_err(|e| ConnectError::Runtime { task: task.clone(), reason: e.to_string() })?;
        let address = listen_address(&task, opening.my_address)?;
        let listener = listen::bind(&task, address, Some(opening.bind_until))?;
        let now = Instant::now();
        let mut round = Round::new(opening.rules, opening.expected, now);
        round.join(opening.me, now).map_err(|reason| ConnectError::BelowMinimum { task: task.clone(), reason })?;
        let round = Arc::new(Mutex::new(round));
        let answered = Arc::new(AtomicUsize::new(0));
        let service = Service {
            round: round.clone(),
            open: opening.token.is_some(),
            known: Arc::new(opening.known),
            fingerprint: Arc::from(opening.fingerprint),
            answered: answered.clone(),
        };
        let service =
            InterceptedService::new(RendezvousServiceServer::new(service), RequireToken::new(opening.token, None));
        let incoming = {
            let _entered = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|e| ConnectError::Listen { task: task.clone(), reason: e.to_string() })?;
            TcpIncoming::from(listener).with_nodelay(Some(true))
        };
        runtime.spawn(async move {
            // A failed server shows up as joiners that never get in; the round's own timeout
            // then names who did.
            let _ = Server::builder().serve_with_incoming(service, incoming).await;
        });
        Ok(Coordinator { runtime, round, answered, task })
    }

    /// Waits for the round to close, then for every joiner to collect its answer, and stops
    /// serving.
    pub fn close(self) -> Result<Membership, ConnectError> {
        let outcome = loop {
            if let Some(outcome) = lock(&self.round).poll(Instant::now()).cloned() {
                break outcome;
            }
            std::thread::sleep(POLL);
        };
        let others = lock(&self.round).joined().saturating_sub(1);
        let deadline = Instant::now() + ANSWER_GRACE;
        while self.answered.load(Ordering::SeqCst) < others && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        self.runtime.shutdown_background();
        match outcome {
            Outcome::Formed(membership) => Ok(membership),
            Outcome::Failed(reason) => Err(ConnectError::BelowMinimum { task: self.task, reason }),
        }
    }
}
