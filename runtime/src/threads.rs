//! How many compute threads the kernels get by default.
//!
//! One per CPU is rayon's default, and it is wrong where the CPUs are SMT siblings of one
//! another: two threads on the two halves of one core share its multiply-add units and
//! its caches, and both the engine's step and TensorFlow's ran slower on two than on one
//! on such a 2-vCPU machine. So the default is one thread per core, from sysfs' sibling
//! lists. `RAYON_NUM_THREADS` overrides it, as it always did.
//!
//! A virtual machine may hide its siblings, and a second CPU may be busy with another
//! guest's work. Where sysfs shows no siblings every CPU gets a thread, and the sessions
//! time their steps on that pool and on halves of it ([`StepThreads`](crate::StepThreads)),
//! keeping the fastest. A start-up probe (a multiply-add loop on one thread and on all)
//! used to decide here; on one VM it read 1.93×, 1.00× and 1.97× within a minute, and it
//! cannot see that a step of a small model is too short for a second thread to pay.
//! A timing may choose because the thread count changes no result: the reductions split
//! their partial sums by the machine's CPUs, not by the pool's threads
//! (`HostCpu::sum_parts`), so two processes of one job that chose differently, on a
//! machine busy at one's start and idle at the other's, still agree to the last bit
//! (`tests/thread_count.rs`).

use crate::HostCpu;
use std::fmt;
use std::sync::OnceLock;

/// The default thread count and why it was chosen.
#[derive(Debug, Clone)]
pub struct ComputeThreads {
    pub count: usize,
    pub reason: String,
    /// Whether a session may run its steps on fewer threads where they measure faster
    /// (not when `RAYON_NUM_THREADS` fixed the count).
    pub tunable: bool,
}

impl fmt::Display for ComputeThreads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.count, self.reason)
    }
}

impl ComputeThreads {
    pub fn get() -> &'static ComputeThreads {
        static CHOICE: OnceLock<ComputeThreads> = OnceLock::new();
        CHOICE.get_or_init(choose)
    }
}

/// Sizes rayon's global pool to [`ComputeThreads`], once, if nothing has started it yet
/// (then it keeps its size). Returns the choice.
pub fn use_compute_threads() -> &'static ComputeThreads {
    let choice = ComputeThreads::get();
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means the pool already exists (an embedding program built it).
        let _ = rayon::ThreadPoolBuilder::new().num_threads(choice.count).build_global();
    });
    choice
}

fn choose() -> ComputeThreads {
    if let Some(n) =
        std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|&n| n > 0)
    {
        return ComputeThreads { count: n, reason: "RAYON_NUM_THREADS".into(), tunable: false };
    }
    let host = HostCpu::get();
    let cpus = host.cpus.len().max(1);
    let (count, why) = if host.has_smt_siblings() {
        (host.cores, format!("one per core: the {cpus} CPUs are {} cores with SMT siblings", host.cores))
    } else {
        (cpus, format!("{cpus} CPUs on {cpus} cores"))
    };
    if count == 1 {
        return ComputeThreads { count, reason: why, tunable: false };
    }
    let reason = format!("{why}; steps are timed on these and on fewer, and the fastest kept");
    ComputeThreads { count, reason, tunable: true }
}
