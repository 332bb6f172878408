//! Graceful stops on SIGTERM and SIGINT: what every preemption, Kubernetes eviction, Slurm
//! time limit and Ctrl-C sends.
//!
//! [`install`] makes the first signal a request, recorded and nothing more (a signal
//! handler can do little safely). The training loop looks at it between steps: it
//! finishes the step in flight, the chief writes a checkpoint (a cluster first agrees on
//! one final step, see [`engine_graph::passes::strategy::AgreeOnStop`]), and training
//! returns [`crate::EstimatorError::Preempted`]; the `engine` binary then exits with
//! `128 + signal` (143 for SIGTERM, 130 for SIGINT), which orchestrators treat as
//! retryable. A second signal exits at once with that code: the way out when saving hangs.
//!
//! ```
//! use engine_estimator::preemption;
//! assert!(preemption::requested().is_none());
//! ```

use std::sync::atomic::{AtomicI32, Ordering};

/// The first signal received, 0 before any.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// A signal that asked the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub i32);

impl Signal {
    pub const TERM: Signal = Signal(libc::SIGTERM);
    pub const INT: Signal = Signal(libc::SIGINT);

    /// `SIGTERM`, `SIGINT`, or the number.
    pub fn name(self) -> String {
        match self.0 {
            libc::SIGTERM => "SIGTERM".into(),
            libc::SIGINT => "SIGINT".into(),
            libc::SIGHUP => "SIGHUP".into(),
            n => format!("signal {n}"),
        }
    }

    /// The shell's convention for a process ended by this signal: retryable (128 and above)
    /// for Kubeflow's `restartPolicy: ExitCode`.
    pub fn exit_code(self) -> u8 {
        (128 + self.0.clamp(1, 127)) as u8
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// The signals [`install`] handles.
pub const SIGNALS: [i32; 2] = [libc::SIGTERM, libc::SIGINT];

extern "C" fn on_signal(signal: libc::c_int) {
    if RECEIVED.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst).is_err() {
        // The second signal: out at once. `_exit` is async-signal-safe; nothing else here
        // may allocate or lock.
        unsafe { libc::_exit(128 + signal) };
    }
}

/// Handles SIGTERM and SIGINT as described in the module docs, for the whole process.
pub fn install() -> std::io::Result<()> {
    for signal in SIGNALS {
        // SAFETY: a zeroed sigaction is a valid value to fill in; the handler only touches an
        // atomic and calls `_exit`, both async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The first stop request, if one came.
pub fn requested() -> Option<Signal> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        n => Some(Signal(n)),
    }
}

/// Asks for a stop as a signal would (a program embedding the estimator, or a test).
pub fn request(signal: Signal) {
    let _ = RECEIVED.compare_exchange(0, signal.0, Ordering::SeqCst, Ordering::SeqCst);
}
