//! Binding a task's address, where a re-formed group may find it still held for a moment.
//!
//! Re-forming an elastic job's group binds the same address twice in quick succession (the
//! old group's server, the rendezvous, the new group's server), and a runtime that was
//! just shut down releases its listener from another thread. The first bind of a job
//! fails at once instead, so that a port some other program holds is named at once.

use super::ConnectError;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

const RETRY_INTERVAL: Duration = Duration::from_millis(20);

/// Binds `address` (non-blocking, for tokio), retrying while it is in use until
/// `retry_until`, when there is one.
pub(super) fn bind(task: &str, address: SocketAddr, retry_until: Option<Instant>) -> Result<TcpListener, ConnectError> {
    loop {
        match TcpListener::bind(address).and_then(|l| l.set_nonblocking(true).map(|()| l)) {
            Ok(listener) => return Ok(listener),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && retry_until.is_some_and(|until| Instant::now() < until) =>
            {
                std::thread::sleep(RETRY_INTERVAL);
            }
            Err(e) => {
                return Err(ConnectError::Listen { task: task.to_string(), reason: format!("binding {address}: {e}") });
            }
        }
    }
}
