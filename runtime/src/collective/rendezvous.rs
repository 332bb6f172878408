//! A reusable meeting point for a fixed group of threads, with a deadline and abort.

use crate::{Result, RuntimeError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a waiter spins before sleeping on the condvar.
const SPIN: Duration = Duration::from_micros(50);

/// Generation-counted barrier: the last arrival advances the generation and wakes the
/// others. Waiting past the deadline reports which ranks never arrived.
///
/// A waiter spins briefly on a copy of the generation before sleeping: a condvar wake-up
/// costs tens of microseconds, several times a small all-reduce, and replicas usually
/// arrive within a few microseconds of each other.
pub(crate) struct Rendezvous {
    state: Mutex<State>,
    generation: AtomicU64,
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
            generation: AtomicU64::new(0),
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
        if self.advance_if_last(&mut s) {
            return Ok(());
        }
        s = self.spin(s, generation);
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

    /// Waits until all ranks called `pass` for this round, with no deadline and deaf to
    /// aborts: for the meetings inside an operation after every member has posted its
    /// tensor, where the others only do bounded memory work and may be reading this
    /// member's tensor, so leaving early on an abort could free memory still being read.
    pub fn pass(&self, rank: usize) {
        let mut s = self.lock();
        let generation = s.generation;
        s.arrived[rank] = true;
        if self.advance_if_last(&mut s) {
            return;
        }
        s = self.spin(s, generation);
        while s.generation == generation {
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Opens the next round when every rank has arrived.
    fn advance_if_last(&self, s: &mut State) -> bool {
        if !s.arrived.iter().all(|a| *a) {
            return false;
        }
        s.arrived.iter_mut().for_each(|a| *a = false);
        s.generation += 1;
        self.generation.store(s.generation, Ordering::Release);
        self.cv.notify_all();
        true
    }

    /// Releases the lock and spins for up to [`SPIN`] while the round is `generation`,
    /// then takes the lock back.
    fn spin<'a>(&'a self, s: MutexGuard<'a, State>, generation: u64) -> MutexGuard<'a, State> {
        drop(s);
        let start = Instant::now();
        'spin: while self.generation.load(Ordering::Acquire) == generation {
            for _ in 0..64 {
                std::hint::spin_loop();
                if self.generation.load(Ordering::Acquire) != generation {
                    break 'spin;
                }
            }
            if start.elapsed() > SPIN {
                break;
            }
        }
        self.lock()
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
