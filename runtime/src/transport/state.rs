//! The state shared by the synchronous collective code and the asynchronous network tasks.
//!
//! One mutex guards it and one condition variable announces every change (a segment filed,
//! a peer connected, lost or aborting), so that a waiter re-checks everything it depends on
//! after each wake-up and never misses the event that should end its wait. Critical
//! sections are short (a hash-map insert), so one lock costs nothing measurable.

use super::mailbox::Mailbox;
use super::proto::Frame;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// Why a peer will send nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gone {
    /// It closed its stream cleanly: its process dropped its group after finishing. Only
    /// data it never sent is missed.
    Left,
    /// The connection broke (the process died, the network failed) or the peer broke the
    /// protocol. Nothing that needs the group can complete any more.
    Lost(String),
}

/// What this process knows of one peer.
#[derive(Debug, Default)]
pub(super) struct PeerState {
    /// Its handshake reached this process and was accepted.
    pub greeted: bool,
    /// Its stream of frames to this process was opened (it stays counted once closed, so a
    /// second stream from the same rank, a restarted process, is refused).
    pub inbound_opened: bool,
    /// This process's stream to it, once the handshake succeeded.
    pub outbound: Option<UnboundedSender<Frame>>,
    pub gone: Option<Gone>,
    /// The last failure while reaching it, for the connect timeout's message.
    pub last_error: Option<String>,
}

#[derive(Debug)]
pub(super) struct State {
    pub mailbox: Mailbox,
    /// Indexed by rank; this process's own entry stays default.
    pub peers: Vec<PeerState>,
    /// Set by a local `abort`, a failed collective, or a peer's abort frame: why, and whether
    /// the failure behind it is retryable.
    pub aborted: Option<(String, bool)>,
    /// A handshake refused in either direction: (the peer as named, reason).
    pub refused: Option<(String, String)>,
    /// The group is being dropped: streams closing now are expected.
    pub closing: bool,
    /// Calls this task refused from callers that are not members (a wrong token, another
    /// job's process): the first few, to explain why a connect timed out.
    pub refusals: Vec<String>,
    /// This process's outbound streams still open, so that dropping the group can wait
    /// until they have delivered what was queued.
    pub streams_out: usize,
    /// Tasks that asked to join the job (see `Announce`), in the order they asked.
    pub joiners: Vec<crate::cluster::TaskId>,
    /// Every member connected: the group runs (a task of it starting again is stale).
    pub formed: bool,
}

impl State {
    /// Records a refused call, keeping the first few distinct ones.
    pub fn note_refusal(&mut self, what: String) {
        const KEPT: usize = 4;
        if self.refusals.len() < KEPT && !self.refusals.contains(&what) {
            self.refusals.push(what);
        }
    }
}

pub(super) struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    pub fn new(size: usize) -> Self {
        let state = State {
            mailbox: Mailbox::default(),
            peers: (0..size).map(|_| PeerState::default()).collect(),
            aborted: None,
            refused: None,
            closing: false,
            streams_out: 0,
            refusals: Vec::new(),
            joiners: Vec::new(),
            formed: false,
        };
        Shared { state: Mutex::new(state), changed: Condvar::new() }
    }

    /// The state, even if a thread panicked while holding it: the state is always
    /// consistent between statements, and a poisoned lock must not hide the real error.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Wakes every waiter to re-check the state.
    pub fn notify(&self) {
        self.changed.notify_all();
    }

    /// Sleeps until a change is announced or `deadline` passes; false once it has passed.
    pub fn wait_until<'a>(&self, guard: MutexGuard<'a, State>, deadline: Instant) -> (MutexGuard<'a, State>, bool) {
        let now = Instant::now();
        if now >= deadline {
            return (guard, false);
        }
        let (guard, _) = self.changed.wait_timeout(guard, deadline - now).unwrap_or_else(|p| p.into_inner());
        (guard, true)
    }

    /// Records that `peer`'s connection broke, unless it had already left or the group is
    /// closing (then a broken connection is the expected end).
    pub fn lose(&self, peer: usize, reason: String) {
        let mut state = self.lock();
        if !state.closing
            && let Some(p) = state.peers.get_mut(peer)
            && p.gone.is_none()
        {
            p.gone = Some(Gone::Lost(reason));
        }
        drop(state);
        self.notify();
    }

    /// Records that `peer` closed its stream cleanly.
    pub fn leave(&self, peer: usize) {
        let mut state = self.lock();
        if let Some(p) = state.peers.get_mut(peer)
            && p.gone.is_none()
        {
            p.gone = Some(Gone::Left);
        }
        drop(state);
        self.notify();
    }

    /// Fails every pending and later collective with `reason` (the first reason wins).
    pub fn abort(&self, reason: String, retryable: bool) {
        let mut state = self.lock();
        if state.aborted.is_none() {
            state.aborted = Some((reason, retryable));
        }
        drop(state);
        self.notify();
    }
}
