//! This task's side of the connection to one peer: reach it (retrying while it starts),
//! shake hands, then keep one `Exchange` stream open for the life of the group.
//!
//! The stream is fed by an unbounded channel, so the synchronous collective code queues a
//! segment without blocking and without a runtime of its own; HTTP/2 flow control paces
//! the actual transfer. One stream per peer, opened once, keeps a small message's latency
//! to a frame write and a read, with no call set-up.

use super::auth::AttachToken;
use super::handshake::{self, Claim};
use super::members::Members;
use super::proto::Frame;
use super::proto::collective_service_client::CollectiveServiceClient;
use super::server::RANK_HEADER;
use super::state::Shared;
use super::tls::LoadedTls;
use std::error::Error as _;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Code;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// gRPC refuses messages over 4 MiB by default; segments are 1 MiB, so this leaves room
/// without letting a peer make this task buffer arbitrarily large messages.
pub(super) const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// HTTP/2's default 64 KiB windows would stall a 1 MiB segment on every round trip of
/// window updates; these let several segments be in flight per stream.
pub(super) const STREAM_WINDOW_BYTES: u32 = 16 << 20;
pub(super) const CONNECTION_WINDOW_BYTES: u32 = 32 << 20;
/// HTTP/2 frames as large as a segment (the default is 16 KiB), so that a segment costs one
/// frame header and one vectored write instead of sixty-four.
pub(super) const MAX_FRAME_BYTES: u32 = (1 << 20) + 1024;
/// Pings on idle connections, so that a peer whose machine vanished without closing the
/// socket is noticed even between collectives.
pub(super) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
pub(super) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one connection attempt may take before retrying.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts while a peer is not up yet: peers start in any order.
const RETRY_INTERVAL: Duration = Duration::from_millis(50);

type Client = CollectiveServiceClient<InterceptedService<Channel, AttachToken>>;

/// What every link of one group shares.
pub(super) struct LinkContext {
    pub shared: Arc<Shared>,
    pub members: Arc<Members>,
    pub fingerprint: Arc<str>,
    pub token: Option<AsciiMetadataValue>,
    pub tls: Option<LoadedTls>,
    /// When `connect` gives up.
    pub deadline: Instant,
}

enum Failure {
    /// The peer (or this task) refused the handshake: retrying cannot help.
    Refused(String),
    /// The deadline passed, or the group stopped connecting; the last error is recorded.
    GaveUp,
}

/// Connects to `peer` and serves this task's stream to it until the group closes. Every
/// outcome is recorded in the shared state, where `connect` and the collectives see it.
pub(super) async fn run(context: Arc<LinkContext>, peer: usize) {
    let client = match reach(&context, peer).await {
        Ok(client) => client,
        Err(Failure::Refused(reason)) => {
            let mut state = context.shared.lock();
            if state.refused.is_none() {
                state.refused = Some((context.members.describe(peer), reason));
            }
            drop(state);
            context.shared.notify();
            return;
        }
        Err(Failure::GaveUp) => return,
    };
    let (sender, receiver) = mpsc::unbounded_channel::<Frame>();
    let mut request = tonic::Request::new(UnboundedReceiverStream::new(receiver));
    request.metadata_mut().insert(RANK_HEADER, AsciiMetadataValue::from(context.members.me as u64));
    {
        let mut state = context.shared.lock();
        if state.closing {
            // The group is being dropped and has already closed the streams it had.
            return;
        }
        state.peers[peer].outbound = Some(sender);
        state.streams_out += 1;
    }
    context.shared.notify();
    let mut client = client;
    let outcome = client.exchange(request).await;
    if let Err(status) = outcome {
        let name = context.members.describe(peer);
        let reason = if is_refusal(status.code()) || status.code() == Code::AlreadyExists {
            // Its server ended the stream on purpose: it says why.
            let me = context.members.describe(context.members.me);
            format!("{name} refused the stream from {me}: {}", status.message())
        } else {
            format!("the connection to {name} was lost ({})", describe_status(&status))
        };
        context.shared.lose(peer, reason);
    }
    context.shared.lock().streams_out -= 1;
    context.shared.notify();
}

/// Retries until the peer answers the handshake, refuses it, or the deadline passes.
async fn reach(context: &LinkContext, peer: usize) -> Result<Client, Failure> {
    let address = &context.members.members[peer].address;
    let endpoint = endpoint(context, address)?;
    let hello = handshake::hello(&context.members, &context.fingerprint);
    loop {
        let now = Instant::now();
        {
            let state = context.shared.lock();
            if now >= context.deadline || state.closing || state.refused.is_some() || state.aborted.is_some() {
                return Err(Failure::GaveUp);
            }
        }
        let attempt = ATTEMPT_TIMEOUT.min(context.deadline - now);
        let error = match tokio::time::timeout(attempt, endpoint.connect()).await {
            Err(_) => format!("no connection within {attempt:?}"),
            Ok(Err(error)) => error_chain(&error),
            Ok(Ok(channel)) => {
                let mut client =
                    CollectiveServiceClient::with_interceptor(channel, AttachToken::new(context.token.clone()))
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES);
                match tokio::time::timeout(attempt, client.hello(hello.clone())).await {
                    Err(_) => format!("no answer to the handshake within {attempt:?}"),
                    Ok(Ok(reply)) => {
                        let claim = Claim::from(reply.into_inner());
                        return match handshake::check(&context.members, &context.fingerprint, &claim) {
                            Ok(rank) if rank == peer => Ok(client),
                            Ok(rank) => Err(Failure::Refused(format!(
                                "{address} answered as {}, but the cluster has {} there",
                                context.members.describe(rank),
                                context.members.describe(peer)
                            ))),
                            Err(reason) => Err(Failure::Refused(reason)),
                        };
                    }
                    Ok(Err(status)) if is_refusal(status.code()) => {
                        return Err(Failure::Refused(status.message().to_string()));
                    }
                    Ok(Err(status)) => describe_status(&status),
                }
            }
        };
        context.shared.lock().peers[peer].last_error = Some(error);
        tokio::time::sleep(RETRY_INTERVAL).await;
    }
}

fn endpoint(context: &LinkContext, address: &str) -> Result<Endpoint, Failure> {
    let scheme = if context.tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
        .map_err(|e| Failure::Refused(format!("the address {address} is not a valid URI authority: {e}")))?
        .connect_timeout(ATTEMPT_TIMEOUT)
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    match &context.tls {
        Some(tls) => endpoint
            .tls_config(tls.client(address))
            .map_err(|e| Failure::Refused(format!("TLS configuration for {address}: {}", error_chain(&e)))),
        None => Ok(endpoint),
    }
}

/// Answers that mean "never", as opposed to "not yet" (a server still starting answers
/// `Unavailable`).
fn is_refusal(code: Code) -> bool {
    matches!(code, Code::Unauthenticated | Code::FailedPrecondition | Code::PermissionDenied | Code::InvalidArgument)
}

fn describe_status(status: &tonic::Status) -> String {
    let message = status.message();
    let mut text = match status.source() {
        // The source usually repeats the message and adds the cause.
        Some(source) => {
            let chain = error_chain(source);
            if chain.starts_with(message) { chain } else { format!("{message}: {chain}") }
        }
        None => message.to_string(),
    };
    if status.code() != Code::Unknown {
        text = format!("{:?}: {text}", status.code());
    }
    text
}

/// An error with its causes: tonic's own message is only "transport error".
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
