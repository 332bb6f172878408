//! How many compute threads the kernels get by default.
//!
//! One per CPU is rayon's default, and it is wrong where the CPUs are SMT siblings of one
//! another: two threads on the two halves of one core share its multiply-add units and
//! its caches, and both the engine's step and TensorFlow's ran slower on two than on one
//! on such a 2-vCPU machine. So the default is one thread per core, from sysfs' sibling
//! lists. `RAYON_NUM_THREADS` overrides it, as it always did.
//!
//! A virtual machine may hide its siblings. Where sysfs shows none, [`probe`] measures
//! what the other threads add (a multiply-add loop on one thread and on all, a few tens of
//! milliseconds) and the default keeps only threads that add at least a third of a core.
//! With `ENGINE_STEP_THREADS=timed` no probe runs: every CPU gets a thread and each session
//! times its own steps on that pool and on halves of it ([`StepThreads`](crate::StepThreads)).
//! A timing may choose because the thread count changes no result: the reductions split
//! their partial sums by the machine's CPUs, not by the pool's threads
//! (`HostCpu::sum_parts`), so two processes of one job that chose differently, on a
//! machine busy at one's start and idle at the other's, still agree to the last bit
//! (`tests/thread_count.rs`).

use crate::HostCpu;
use std::fmt;
use std::sync::OnceLock;
use std::time::Instant;

/// The default thread count and why it was chosen.
#[derive(Debug, Clone)]
pub struct ComputeThreads {
    pub count: usize,
    pub reason: String,
    /// Whether sessions time their steps on this pool and on smaller ones and keep the
    /// fastest (`ENGINE_STEP_THREADS=timed`; [`StepThreads`](crate::StepThreads)).
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

/// Turns on the timed choice of each session's pool (`timed`).
const STEP_THREADS_ENV: &str = "ENGINE_STEP_THREADS";

fn choose() -> ComputeThreads {
    let timed = std::env::var(STEP_THREADS_ENV).is_ok_and(|v| v.trim() == "timed");
    let mut choice = guess(timed);
    choice.tunable &= timed;
    choice
}

/// `timed`: the sessions will time their steps, so no probe guesses for them.
fn guess(timed: bool) -> ComputeThreads {
    if let Some(n) =
        std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|&n| n > 0)
    {
        return ComputeThreads { count: n, reason: "RAYON_NUM_THREADS".into(), tunable: false };
    }
    let host = HostCpu::get();
    let cpus = host.cpus.len().max(1);
    if host.has_smt_siblings() {
        return ComputeThreads {
            count: host.cores,
            reason: format!("one per core: the {cpus} CPUs are {} cores with SMT siblings", host.cores),
            tunable: host.cores > 1,
        };
    }
    if cpus == 1 {
        return ComputeThreads { count: 1, reason: "one CPU".into(), tunable: false };
    }
    if timed {
        let reason = format!("{cpus} CPUs on {cpus} cores; each session times its steps on them and on halves");
        return ComputeThreads { count: cpus, reason, tunable: true };
    }
    let speedup = probe(cpus);
    let count = useful_threads(cpus, speedup);
    let mut reason = format!(
        "{cpus} CPUs on {cpus} cores; a multiply-add probe ran {speedup:.2}× as fast on {cpus} threads as on one"
    );
    if count < cpus {
        reason.push_str(
            "; threads that add under a third of a core (SMT siblings the topology does not show, or busy CPUs) are not used",
        );
    }
    ComputeThreads { count, reason, tunable: false }
}

/// The threads worth running when `cpus` threads reach `speedup` times one thread's rate:
/// one per whole core's worth of rate, counting a thread that adds at least a third of a
/// core's (less is a sibling in disguise, or a CPU someone else is using).
fn useful_threads(cpus: usize, speedup: f64) -> usize {
    ((speedup + 0.67).floor() as usize).clamp(1, cpus)
}

/// How many times one thread's multiply-add rate `threads` threads reach together (best
/// of three tries each, alternated, so that a moment's interference does not decide).
fn probe(threads: usize) -> f64 {
    // About 4 ms per run on a 3 GHz core: long against a thread's start-up (tens of
    // microseconds), short against a process's start.
    const ROUNDS: usize = 750_000;
    let timed = |n: usize| {
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| std::hint::black_box(multiply_add(ROUNDS)));
            }
        });
        start.elapsed()
    };
    // An idle vCPU of a virtual machine comes back slowly. Timed cold, as it was, the
    // probe read under 1.33× (so one thread) in 6 of 12 runs on a 2-vCPU Zen 5 that reads
    // 1.9× warm; alternated with it, a build that spun all threads once first read so in
    // 1 of 12. So all the threads spin first, untimed, and the tries alternate one
    // thread and all.
    for _ in 0..3 {
        let _ = timed(threads);
    }
    let (mut one, mut all) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        one = one.min(timed(1).as_secs_f64());
        all = all.min(timed(threads).as_secs_f64());
    }
    if all <= 0.0 { threads as f64 } else { threads as f64 * one / all }
}

/// Independent multiply-add chains, enough of them to keep a core's vector units busy
/// (one thread alone fills them; a sibling then has nothing left to use).
fn multiply_add(rounds: usize) -> f32 {
    let mut acc = [1.0f32; 64];
    for _ in 0..rounds {
        for a in acc.iter_mut() {
            *a = *a * 0.999_9 + 0.000_1;
        }
    }
    acc.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_that_add_little_are_not_used() {
        assert_eq!(useful_threads(2, 1.05), 1, "hyperthreads of one core");
        assert_eq!(useful_threads(2, 1.4), 2);
        assert_eq!(useful_threads(2, 1.97), 2);
        assert_eq!(useful_threads(4, 2.1), 2, "two cores with two siblings each");
        assert_eq!(useful_threads(4, 9.0), 4);
        assert_eq!(useful_threads(3, 0.2), 1);
    }

    #[test]
    fn the_probe_measures_a_positive_rate() {
        let s = probe(2);
        assert!(s > 0.0 && s.is_finite(), "{s}");
    }
}
