//! [`NetworkGroup`]: one task's membership of the collective group, and the [`Collective`]
//! implementation the multi-worker strategy trains with.

use super::auth::{OnRefused, RequireToken, token_value};
use super::communication::Communication;
use super::config::NetworkConfig;
use super::error::ConnectError;
use super::link::{
    self, CONNECTION_WINDOW_BYTES, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, LinkContext, MAX_FRAME_BYTES,
    MAX_MESSAGE_BYTES, STREAM_WINDOW_BYTES,
};
use super::listen;
use super::members::Members;
use super::membership::Membership;
use super::operation::Op;
use super::proto::collective_service_server::CollectiveServiceServer;
use super::proto::{Abort, Frame, frame::Body};
use super::server::Service;
use super::shared_memory::{self, Established, SharedMemory};
use super::state::{Gone, Shared, State};
use super::tls::LoadedTls;
use super::wire::{Element, Kind};
use super::{all_gather, all_reduce, barrier, broadcast};
use crate::{Collective, Result, RuntimeError};
use engine_graph::ops::ReduceOp;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, Runtime};
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// Threads of the group's own tokio runtime. The network work is I/O and copies; two
/// threads keep one slow peer's stream from delaying another's without taking cores from
/// the training step.
const RUNTIME_THREADS: usize = 2;

/// How long a task whose `connect` failed keeps answering its peers before it stops.
const FAILED_CONNECT_LINGER: Duration = Duration::from_millis(250);

/// How long dropping the group waits for its queued frames to reach the peers.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// This task's membership of the collective group, over gRPC.
///
/// Built by [`connect`](NetworkGroup::connect), which returns once every member is
/// reachable in both directions. The collectives are synchronous: they queue segments for
/// the group's internal runtime and wait on a mailbox, with the configured deadline. Any
/// failure aborts the whole group (and tells the peers): once members disagree on which
/// operation they are in, no later collective could be trusted.
///
/// Dropping the group closes its streams cleanly after what was queued has been delivered,
/// so peers tell a finished task (it left) from a crashed one (its connection was lost).
pub struct NetworkGroup {
    members: Arc<Members>,
    shared: Arc<Shared>,
    timeout: Duration,
    /// The next operation's number; held for the whole operation, so that two threads
    /// calling collectives on one group run them one after the other, not interleaved.
    next_operation: Mutex<u64>,
    /// Spawns onto `runtime` without locking it.
    handle: Handle,
    /// Taken (and shut down) when the group stops.
    runtime: Mutex<Option<Runtime>>,
    /// The all-reduce's shared-memory path, when every member could map the segment.
    shared_memory: Option<SharedMemory>,
    /// Why all-reduce goes over gRPC, when it does.
    ring_because: Option<String>,
}

impl NetworkGroup {
    /// Binds this task's address (from the cluster spec), starts the gRPC server on an
    /// internal tokio runtime, connects to every other collective member, performs the
    /// handshake (fingerprint, task identity, token), and returns when all members are
    /// connected.
    pub fn connect(config: NetworkConfig) -> Result<Arc<NetworkGroup>> {
        let members = Members::from_cluster(&config.cluster)?;
        Self::connect_members(config, members)
    }

    /// Connects the group of one membership epoch of an elastic job (see
    /// [`rendezvous`](super::rendezvous)): its members in its rank order, at the cluster's
    /// addresses. Peers of another epoch are refused at the handshake.
    pub fn connect_epoch(config: NetworkConfig, membership: &Membership) -> Result<Arc<NetworkGroup>> {
        let members = Members::from_membership(&config.cluster, membership)?;
        Self::connect_members(config, members)
    }

    fn connect_members(config: NetworkConfig, members: Members) -> Result<Arc<NetworkGroup>> {
        let members = Arc::new(members);
        let me = members.describe(members.me);
        let token = match &config.token {
            Some(token) => Some(token_value(token).ok_or_else(|| ConnectError::InvalidToken { task: me.clone() })?),
            None => None,
        };
        let tls = match &config.tls {
            Some(tls) => Some(tls.load().map_err(|reason| ConnectError::Tls { task: me.clone(), reason })?),
            None => None,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("engine-collective")
            .enable_all()
            .build()
            .map_err(|e| ConnectError::Runtime { task: me.clone(), reason: e.to_string() })?;
        let deadline = Instant::now() + config.connect_timeout;
        let fingerprint: Arc<str> = Arc::from(config.fingerprint.as_str());
        // From here on, returning early drops `group`, which stops whatever was started.
        let mut group = NetworkGroup {
            shared_memory: None,
            ring_because: None,
            shared: Arc::new(Shared::new(members.size())),
            members,
            timeout: config.collective_timeout,
            next_operation: Mutex::new(0),
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
        };
        group.serve(&fingerprint, token.clone(), tls.as_ref(), deadline)?;
        let context = Arc::new(LinkContext {
            shared: group.shared.clone(),
            members: group.members.clone(),
            fingerprint,
            token,
            tls,
            deadline,
        });
        for peer in group.members.peers() {
            group.handle.spawn(link::run(context.clone(), peer));
        }
        if let Err(error) = group.wait_connected(deadline, config.connect_timeout) {
            // Tell the peers already connected why this task gives up, so that they fail
            // with the cause rather than with a connection that closed, and keep serving a
            // moment so that a refusal this task just answered reaches its caller (stopping
            // at once can drop the reply, and the caller would wait out its timeout).
            group.abort_group(error.to_string(), error.is_retryable());
            std::thread::sleep(FAILED_CONNECT_LINGER);
            return Err(error.into());
        }
        match shared_memory::establish(&group, config.communication)? {
            Established::Mapped(mapping) => group.shared_memory = Some(mapping),
            Established::NotUsed(reason) => group.ring_because = Some(reason),
        }
        Ok(Arc::new(group))
    }

    /// The path all-reduce takes: `SharedMemory` or `Ring`, as decided at connect.
    pub fn communication(&self) -> Communication {
        if self.shared_memory.is_some() { Communication::SharedMemory } else { Communication::Ring }
    }

    /// The membership epoch this group was formed in (0 unless an elastic job re-formed it).
    pub fn epoch(&self) -> u64 {
        self.members.epoch
    }

    /// The members whose connection broke (not those that left cleanly): after a failed
    /// collective, the tasks a rendezvous need not wait for.
    pub fn lost_members(&self) -> Vec<crate::cluster::TaskId> {
        let state = self.shared.lock();
        self.members
            .peers()
            .filter(|&p| matches!(state.peers[p].gone, Some(Gone::Lost(_))))
            .map(|p| self.members.members[p].task)
            .collect()
    }

    /// The tasks that asked to join the job while this group ran (recorded by its first
    /// member): the next rendezvous expects them.
    pub fn joiners(&self) -> Vec<crate::cluster::TaskId> {
        self.shared.lock().joiners.clone()
    }

    /// Why all-reduce goes over gRPC rather than shared memory (`None` when it does not).
    pub fn ring_reason(&self) -> Option<&str> {
        self.ring_because.as_deref()
    }

    /// Binds this task's address and starts serving the handshake and the peers' streams.
    fn serve(
        &self,
        fingerprint: &Arc<str>,
        token: Option<AsciiMetadataValue>,
        tls: Option<&LoadedTls>,
        deadline: Instant,
    ) -> Result<()> {
        let me = self.members.describe(self.members.me);
        // Bound here, not inside the server task, so that a taken port fails `connect` at
        // once and by name; a re-formed epoch waits for the rendezvous to let it go.
        let address = self.members.listen_address()?;
        let retry_until = (self.members.epoch > 0).then_some(deadline);
        let listener = listen::bind(&me, address, retry_until)?;
        let incoming = {
            let _entered = self.handle.enter();
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|e| ConnectError::Listen { task: me.clone(), reason: e.to_string() })?;
            TcpIncoming::from(listener).with_nodelay(Some(true))
        };
        let service = CollectiveServiceServer::new(Service {
            shared: self.shared.clone(),
            members: self.members.clone(),
            fingerprint: fingerprint.clone(),
            open: token.is_some(),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let service =
            InterceptedService::new(service, RequireToken::new(token, Some(record_auth_failure(&self.shared))));
        let mut server = Server::builder()
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .max_frame_size(MAX_FRAME_BYTES)
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT));
        if let Some(tls) = tls {
            server = server
                .tls_config(tls.server())
                .map_err(|e| ConnectError::Tls { task: me.clone(), reason: link::error_chain(&e) })?;
        }
        let shared = self.shared.clone();
        self.handle.spawn(async move {
            if let Err(error) = server.serve_with_incoming(service, incoming).await {
                shared.abort(format!("the server of {me} stopped: {}", link::error_chain(&error)), true);
            }
        });
        Ok(())
    }

    /// Waits until every peer is reachable both ways, or says which are not.
    fn wait_connected(&self, deadline: Instant, timeout: Duration) -> Result<(), ConnectError> {
        let me = self.members.describe(self.members.me);
        let mut state = self.shared.lock();
        loop {
            if let Some((peer, reason)) = &state.refused {
                return Err(ConnectError::Refused { task: me, peer: peer.clone(), reason: reason.clone() });
            }
            if let Some((reason, _)) = &state.aborted {
                return Err(ConnectError::Aborted { task: me, reason: reason.clone() });
            }
            if self.members.peers().all(|p| state.peers[p].outbound.is_some() && state.peers[p].inbound_opened) {
                state.formed = true;
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ConnectError::Timeout { task: me, timeout, missing: self.missing(&state) });
            }
            if let Some(peer) = self.members.peers().find(|&p| state.peers[p].gone.is_some()) {
                let mut reason = match &state.peers[peer].gone {
                    Some(Gone::Lost(reason)) => reason.clone(),
                    _ => "it closed its connection".to_string(),
                };
                reason.push_str(&refusal_hint(&state.refusals));
                return Err(ConnectError::PeerLost { task: me, peer: self.members.describe(peer), reason });
            }
            state = self.shared.wait_until(state, deadline).0;
        }
    }

    /// The peers not yet connected both ways, each with what is known of why.
    fn missing(&self, state: &State) -> String {
        let missing: Vec<String> = self
            .members
            .peers()
            .filter_map(|p| {
                let peer = &state.peers[p];
                let name = self.members.describe(p);
                if peer.outbound.is_none() {
                    let why = peer.last_error.as_deref().unwrap_or("no answer yet");
                    Some(format!("{name} (not reachable: {why})"))
                } else if !peer.inbound_opened {
                    Some(format!("{name} (it has not connected back)"))
                } else {
                    None
                }
            })
            .collect();
        missing.join("; ") + &refusal_hint(&state.refusals)
    }

    /// Runs one collective as the next operation; a failure aborts the group.
    fn run<T>(&self, kind: Kind, tensor_len: usize, same_len: bool, body: impl FnOnce(&Op) -> Result<T>) -> Result<T> {
        let mut next = self.next_operation.lock().unwrap_or_else(|p| p.into_inner());
        let operation = *next;
        *next += 1;
        let op = Op {
            members: &self.members,
            shared: &self.shared,
            operation,
            kind,
            tensor_len: tensor_len as u64,
            same_len,
            timeout: self.timeout,
            deadline: Instant::now() + self.timeout,
        };
        let result = op.check_alive().and_then(|()| body(&op));
        if let Err(error) = &result {
            // Before finishing the operation: from here on, peers' late segments for it are
            // expected, not a broken peer (see the server), so that a rendezvous after this
            // failure does not count a healthy peer as lost.
            self.abort_group(error.to_string(), error.is_retryable());
        }
        let left_over = self.shared.lock().mailbox.finish(operation);
        if let (Ok(_), Some(tag)) = (&result, left_over.first()) {
            let error = op.error(
                format!(
                    "{} sent segment {} of step {} of operation {} that {} did not expect: the tasks called {} with \
                     different arguments (a broadcast's root, say)",
                    self.members.describe(tag.sender),
                    tag.index,
                    tag.step,
                    operation,
                    self.members.describe(self.members.me),
                    kind.name()
                ),
                false,
            );
            self.abort_group(error.to_string(), error.is_retryable());
            return Err(error);
        }
        result
    }

    /// Marks the group failed and, if this is news, tells every peer why.
    fn abort_group(&self, reason: String, retryable: bool) {
        let mut state = self.shared.lock();
        if state.aborted.is_some() {
            return;
        }
        let me = self.members.describe(self.members.me);
        state.aborted = Some((format!("{me}: {reason}"), retryable));
        for peer in &state.peers {
            if let Some(out) = &peer.outbound {
                // Best effort: a peer that cannot be told finds out by its own timeout.
                let _ = out.send(Frame { body: Some(Body::Abort(Abort { reason: reason.clone(), retryable })) });
            }
        }
        drop(state);
        self.shared.notify();
    }

    fn all_reduce_any<E: Element>(&self, data: &mut [E], op: ReduceOp) -> Result<()> {
        if self.members.size() == 1 {
            return Ok(());
        }
        match &self.shared_memory {
            Some(mapping) => {
                self.run(E::ALL_REDUCE, data.len(), true, |o| shared_memory::all_reduce(o, mapping, data, op))
            }
            None => self.run(E::ALL_REDUCE, data.len(), true, |o| all_reduce::all_reduce(o, data, op)),
        }
    }

    /// Stops the runtime. `graceful` first closes the streams and waits (briefly) until
    /// the peers have received everything queued.
    fn shut_down(&self, graceful: bool) {
        let Some(runtime) = self.runtime.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        if graceful {
            let mut state = self.shared.lock();
            state.closing = true;
            let senders: Vec<_> = state.peers.iter_mut().filter_map(|p| p.outbound.take()).collect();
            drop(senders);
            let deadline = Instant::now() + CLOSE_GRACE.min(self.timeout);
            while state.streams_out > 0 {
                let (guard, in_time) = self.shared.wait_until(state, deadline);
                state = guard;
                if !in_time {
                    break;
                }
            }
        }
        // Not `drop(runtime)`: that blocks, and panics when the group is dropped inside
        // some other async runtime.
        runtime.shutdown_background();
    }

    /// Stops like a killed process would: no clean close, so peers see a lost connection.
    #[cfg(test)]
    pub(super) fn crash(&self) {
        self.shared.abort("this task crashed".to_string(), false);
        self.shut_down(false);
    }
}

/// A peer refused by this task's token check usually shows up here only as a peer that
/// never connected back or went away; this says why.
fn refusal_hint(refusals: &[String]) -> String {
    if refusals.is_empty() {
        return String::new();
    }
    format!("; meanwhile this task refused: {}", refusals.join("; "))
}

/// Records where calls that failed authentication came from.
fn record_auth_failure(shared: &Arc<Shared>) -> OnRefused {
    let shared = shared.clone();
    Arc::new(move |from| {
        let from = from.map_or_else(|| "an unknown address".to_string(), |a| a.ip().to_string());
        shared.lock().note_refusal(format!("a call from {from}: authentication failed (a different token or none)"));
    })
}

impl Drop for NetworkGroup {
    fn drop(&mut self) {
        self.shut_down(true);
    }
}

impl Collective for NetworkGroup {
    fn rank(&self) -> usize {
        self.members.me
    }

    fn size(&self) -> usize {
        self.members.size()
    }

    fn describe(&self, rank: usize) -> String {
        self.members.describe(rank)
    }

    fn all_reduce(&self, data: &mut [f32], op: ReduceOp) -> Result<()> {
        self.all_reduce_any(data, op)
    }

    fn all_reduce_f64(&self, data: &mut [f64], op: ReduceOp) -> Result<()> {
        self.all_reduce_any(data, op)
    }

    fn broadcast(&self, data: &mut [f32], root: usize) -> Result<()> {
        if root >= self.members.size() {
            return Err(RuntimeError::Collective {
                op: "broadcast".into(),
                reason: format!("no rank {root}: the group has {} members", self.members.size()),
                retryable: false,
            });
        }
        if self.members.size() == 1 {
            return Ok(());
        }
        self.run(Kind::Broadcast, data.len(), true, |o| broadcast::broadcast(o, data, root))
    }

    fn all_gather(&self, data: &[f32]) -> Result<Vec<f32>> {
        if self.members.size() == 1 {
            return Ok(data.to_vec());
        }
        self.run(Kind::AllGather, data.len(), false, |o| all_gather::all_gather(o, data))
    }

    fn barrier(&self) -> Result<()> {
        if self.members.size() == 1 {
            return Ok(());
        }
        self.run(Kind::Barrier, 0, true, barrier::barrier)
    }

    fn abort(&self, reason: &str, retryable: bool) {
        self.abort_group(reason.to_string(), retryable);
    }

    fn pending_joiners(&self) -> usize {
        self.shared.lock().joiners.len()
    }
}
