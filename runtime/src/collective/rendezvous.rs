//! A reusable meeting point for a fixed group of threads, with a deadline and abort.

use crate::{Result, RuntimeError};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Generation-counted barrier: the last arrival advances the generation and wakes the
/// others. Waiting past the deadline reports which ranks never arrived.
pub(crate) struct Rendezvous {
    state: Mutex<State>,
    cv: Condvar,
    size: usize,
    timeout: Duration,
}

struct State {
    generation: u64,
    arrived: Vec<bool>,
    aborted: Option<(String, bool)>,
}

impl Rendezvous {
    pub fn new(size: usize, timeout: Duration) -> Self {
        Rendezvous {
            state: Mutex::new(State { generation: 0, arrived: vec![false; size], aborted: None }),
            cv: Condvar::new(),
            size,
            timeout,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until all ranks called `wait` for this round. `op` names the operation in errors.
    pub fn wait(&self, rank: usize, op: &str, describe: &dyn Fn(usize) -> String) -> Result<()> {
        let mut s = self.lock();
        if let Some((reason, retryable)) = &s.aborted {
            return Err(aborted(op, reason, *retryable));
        }
        let generation = s.generation;
        s.arrived[rank] = true;
        if s.arrived.iter().all(|a| *a) {
            s.arrived.iter_mut().for_each(|a| *a = false);
            s.generation += 1;
            self.cv.notify_all();
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout;
        while s.generation == generation {
            if let Some((reason, retryable)) = &s.aborted {
                return Err(aborted(op, reason, *retryable));
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<String> = (0..self.size).filter(|&r| !s.arrived[r]).map(describe).collect();
                s.arrived[rank] = false;
                return Err(RuntimeError::Collective {
                    op: op.to_string(),
                    reason: format!("{} did not arrive within {:?}", missing.join(", "), self.timeout),
                    retryable: true,
                });
            }
            let (guard, _) = self.cv.wait_timeout(s, deadline - now).unwrap_or_else(|p| p.into_inner());
            s = guard;
        }
        Ok(())
    }

    pub fn abort(&self, reason: &str, retryable: bool) {
        let mut s = self.lock();
        if s.aborted.is_none() {
            s.aborted = Some((reason.to_string(), retryable));
        }
        self.cv.notify_all();
    }
}

fn aborted(op: &str, reason: &str, retryable: bool) -> RuntimeError {
    RuntimeError::Collective { op: op.to_string(), reason: format!("the group was aborted: {reason}"), retryable }
}
