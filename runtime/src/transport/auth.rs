//! The shared-secret token: attached to every call this process makes, required on every
//! call it receives when the group has one.
//!
//! Checked by a tonic interceptor, before any handler runs, so that an unauthenticated
//! caller learns nothing about the job (not even its fingerprint). The token travels as
//! gRPC metadata, so without TLS it is readable on the wire: it keeps out processes of
//! other jobs and stray connections, not an eavesdropper.

use std::net::SocketAddr;
use std::sync::Arc;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The metadata key carrying the token.
pub(super) const TOKEN_HEADER: &str = "x-engine-token";

/// Told where each refused call came from, so that this task's own errors can say that a
/// peer is failing authentication rather than only that it never connected.
pub(super) type OnRefused = Arc<dyn Fn(Option<SocketAddr>) + Send + Sync>;

/// The server side: refuses calls without the expected token.
#[derive(Clone)]
pub(super) struct RequireToken {
    expected: Option<AsciiMetadataValue>,
    on_refused: Option<OnRefused>,
}

impl RequireToken {
    pub fn new(expected: Option<AsciiMetadataValue>, on_refused: Option<OnRefused>) -> Self {
        RequireToken { expected, on_refused }
    }

    fn refuse(&self, request: &Request<()>, why: &str) -> Status {
        if let Some(on_refused) = &self.on_refused {
            on_refused(request.remote_addr());
        }
        Status::unauthenticated(format!(
            "authentication failed: {why} (every task of the cluster needs the same token)"
        ))
    }
}

impl Interceptor for RequireToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else { return Ok(request) };
        match request.metadata().get(TOKEN_HEADER) {
            Some(given) if constant_time_eq(given.as_bytes(), expected.as_bytes()) => Ok(request),
            Some(_) => Err(self.refuse(&request, "the caller's token differs from this task's")),
            None => Err(self.refuse(&request, "the caller sent no token and this task requires one")),
        }
    }
}

/// The client side: adds the token to every call.
#[derive(Clone)]
pub(super) struct AttachToken {
    token: Option<AsciiMetadataValue>,
}

impl AttachToken {
    pub fn new(token: Option<AsciiMetadataValue>) -> Self {
        AttachToken { token }
    }
}

impl Interceptor for AttachToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(token) = &self.token {
            request.metadata_mut().insert(TOKEN_HEADER, token.clone());
        }
        Ok(request)
    }
}

/// The token as metadata, or `None` when it cannot be one (non-ASCII, line breaks).
pub(super) fn token_value(token: &str) -> Option<AsciiMetadataValue> {
    let mut value = AsciiMetadataValue::try_from(token).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Compares without stopping at the first difference, so that response timing does not
/// reveal how much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(server: &mut RequireToken, client_token: Option<&str>) -> Result<(), Status> {
        let mut client = AttachToken::new(client_token.and_then(token_value));
        let request = client.call(Request::new(()))?;
        server.call(request).map(|_| ())
    }

    #[test]
    fn the_right_token_passes_and_others_fail_without_revealing_it() {
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = refused.clone();
        let on_refused: OnRefused = Arc::new(move |_| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let mut server = RequireToken::new(token_value("s3cret"), Some(on_refused));
        assert!(call(&mut server, Some("s3cret")).is_ok());
        for wrong in [Some("s3cre"), Some("other"), None] {
            let status = call(&mut server, wrong).unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unauthenticated);
            assert!(status.message().starts_with("authentication failed"), "{}", status.message());
            assert!(!status.message().contains("s3cret"));
        }
        assert_eq!(refused.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[test]
    fn without_a_token_everything_passes() {
        let mut server = RequireToken::new(None, None);
        assert!(call(&mut server, None).is_ok());
        assert!(call(&mut server, Some("anything")).is_ok());
    }

    #[test]
    fn tokens_that_cannot_be_metadata_are_refused() {
        assert!(token_value("line\nbreak").is_none());
        assert!(token_value("ok-token_1").is_some());
    }
}
