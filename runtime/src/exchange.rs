//! Values passed between the partitions of one step (central storage: the host partition
//! sends variables to the replicas, a replica sends reduced gradients to the host; a
//! parameter-server worker's pulled variables in, its gradients out).

use crate::{Result, RuntimeError, Value};
use engine_graph::Outlet;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A step's mailbox, keyed by the outlet a transfer reads. Values are immutable device
/// tensors, so every receiver gets a cheap clone of the one sent.
pub struct Exchange {
    state: Mutex<State>,
    cv: Condvar,
    timeout: Duration,
}

#[derive(Default)]
struct State {
    values: HashMap<Outlet, Value>,
    aborted: Option<String>,
}

impl Exchange {
    pub fn new(timeout: Duration) -> Self {
        Exchange { state: Mutex::new(State::default()), cv: Condvar::new(), timeout }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn send(&self, outlet: Outlet, value: Value) {
        self.lock().values.insert(outlet, value);
        self.cv.notify_all();
    }

    /// Waits for the value of `outlet`; `what` names the transfer in a timeout error.
    pub fn recv(&self, outlet: Outlet, what: &str) -> Result<Value> {
        let deadline = Instant::now() + self.timeout;
        let mut s = self.lock();
        loop {
            if let Some(reason) = &s.aborted {
                return Err(RuntimeError::Collective {
                    op: format!("transfer {what}"),
                    reason: format!("aborted: {reason}"),
                    retryable: false,
                });
            }
            if let Some(v) = s.values.get(&outlet) {
                return Ok(v.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RuntimeError::Collective {
                    op: format!("transfer {what}"),
                    reason: format!("no value arrived within {:?}", self.timeout),
                    retryable: true,
                });
            }
            s = self.cv.wait_timeout(s, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// The value of `outlet` if it was sent (after a partition ran: what it exported).
    pub fn get(&self, outlet: Outlet) -> Option<Value> {
        self.lock().values.get(&outlet).cloned()
    }

    /// Forgets the previous step's values (call while no partition is running).
    pub fn clear(&self) {
        let mut s = self.lock();
        s.values.clear();
        s.aborted = None;
    }

    pub fn abort(&self, reason: &str) {
        let mut s = self.lock();
        if s.aborted.is_none() {
            s.aborted = Some(reason.to_string());
        }
        self.cv.notify_all();
    }
}
