//! Which compute pool runs a step on the CPU, chosen by timing the step itself.
//!
//! The start-up default ([`ComputeThreads`]) knows the topology, not the step: a small
//! model's step (the MLP's, under a millisecond) can run slower on two threads than on one
//! where a large one gains 1.6×, and a virtual machine may give two vCPUs that are secretly
//! one core's siblings, or one CPU that another guest is using. A multiply-add probe at
//! start-up read 1.93×, 1.00× and 1.97× on one VM within a minute, so its choice flipped
//! between runs. A session that runs one plan step after step can measure instead: it runs
//! its first steps on each candidate pool in turn (all the compute threads, then halves of
//! them down to one), alternating so that a change of load falls on every candidate alike,
//! and keeps the one with the shortest median step. Fewer threads win a tie within 2 %:
//! they leave a CPU to the input pipeline and to the machine's other work.
//!
//! Changing the pool changes no result, so a choice made by timing is safe: reductions
//! split their partial sums by the machine's CPUs, not by the pool's threads
//! ([`HostCpu::sum_parts`](crate::HostCpu::sum_parts), `tests/thread_count.rs`).
//!
//! The whole step runs inside the pool (`install`), so its kernels fork their parallel
//! parts from a worker of that pool and see its thread count; a caller already inside a
//! rayon pool (an embedding program that chose its threads) runs the step there, untimed.

use crate::ComputeThreads;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Steps run on the largest pool before the first trial: the first steps allocate and
/// fault in their buffers, and the loop's start-up work (the first checkpoint, the input's
/// shuffle buffer) competes with them.
const WARMUP: u32 = 10;
/// A trial runs each candidate for a block of consecutive steps, in this many rounds (the
/// order reversed every other round). Switching pools every step measured both pools
/// slower than either ran alone (the MLP at 0.93 ms on each, against 0.55 and 0.73 ms
/// unswitched): the data moves between the cores' caches and the idle pool's threads
/// sleep. So the first step of each block is not timed.
const ROUNDS: usize = 2;
/// Steps per block, for steps under [`LONG_STEP`]; 3 for longer ones, where a step's noise
/// is small against it and a trial on a slow pool costs more.
const BLOCK: usize = 6;
const LONG_STEP: Duration = Duration::from_millis(20);
/// Steps between trials: the machine's load changes (a neighbour's job starts), and one
/// trial can be unlucky.
const RECHECK: u32 = 1000;
/// Fewer threads are kept when their median step is within this of the fastest.
const TIE: f64 = 1.02;

struct Pool {
    threads: usize,
    pool: rayon::ThreadPool,
}

/// The candidate pools, built once per process and shared by every session: the compute
/// threads, then halves of them down to one. One pool when the count is fixed
/// (`RAYON_NUM_THREADS`) or one thread.
fn pools() -> &'static [Pool] {
    static POOLS: OnceLock<Vec<Pool>> = OnceLock::new();
    POOLS.get_or_init(|| {
        let choice = ComputeThreads::get();
        let mut counts = vec![choice.count.max(1)];
        while choice.tunable && counts[counts.len() - 1] > 1 {
            counts.push(counts[counts.len() - 1] / 2);
        }
        counts
            .into_iter()
            .filter_map(|threads| match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
                Ok(pool) => Some(Pool { threads, pool }),
                Err(e) => {
                    log::warn!("cannot start a pool of {threads} compute threads ({e}); steps will not try it");
                    None
                }
            })
            .collect()
    })
}

/// The pool one session's steps run on: chosen by a trial after its first steps, checked
/// again by another every [`RECHECK`] steps.
pub struct StepThreads {
    phase: Phase,
    /// The pool the steps run on between trials (the largest until the first).
    chosen: usize,
    decided: bool,
    /// Steps per block in trials, set from the warm-up's last step.
    block: usize,
    samples: Vec<Vec<Duration>>,
    recheck: u32,
    /// What the choice was made for, in its log line ("training steps").
    what: &'static str,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Warmup(u32),
    /// Step `k` of a trial.
    Trial(usize),
    Chosen(u32),
}

impl StepThreads {
    pub fn new(what: &'static str) -> Self {
        Self::with_recheck(what, RECHECK)
    }

    fn with_recheck(what: &'static str, recheck: u32) -> Self {
        let candidates = pools().len();
        let phase = if candidates <= 1 { Phase::Chosen(0) } else { Phase::Warmup(0) };
        StepThreads {
            phase,
            chosen: 0,
            decided: candidates <= 1,
            block: BLOCK,
            samples: vec![Vec::new(); candidates],
            recheck: if candidates <= 1 { u32::MAX } else { recheck },
            what,
        }
    }

    /// The threads the steps run on, once a trial chose them.
    pub fn chosen_threads(&self) -> Option<usize> {
        self.decided.then(|| pools().get(self.chosen).map(|p| p.threads)).flatten()
    }

    /// Runs one step on the pool its turn falls to.
    pub fn run<R: Send>(&mut self, step: impl FnOnce() -> R + Send) -> R {
        let pools = pools();
        if pools.is_empty() || rayon::current_thread_index().is_some() {
            return step();
        }
        let (pool, timed) = self.turn();
        let start = Instant::now();
        let out = pools[pool].pool.install(step);
        self.after(pool, timed, start.elapsed(), pools);
        out
    }

    /// The pool of the next step, and whether its time is a sample.
    fn turn(&self) -> (usize, bool) {
        match self.phase {
            Phase::Warmup(_) => (0, false),
            Phase::Chosen(_) => (self.chosen, false),
            Phase::Trial(k) => {
                let candidates = self.samples.len();
                let (round, within) = (k / (candidates * self.block), k % (candidates * self.block));
                let slot = within / self.block;
                let pool = if round % 2 == 1 { candidates - 1 - slot } else { slot };
                (pool, within % self.block != 0)
            }
        }
    }

    fn after(&mut self, pool: usize, timed: bool, took: Duration, pools: &[Pool]) {
        if timed {
            self.samples[pool].push(took);
        }
        self.phase = match self.phase {
            Phase::Warmup(n) if n + 1 < WARMUP => Phase::Warmup(n + 1),
            Phase::Warmup(_) => {
                self.block = if took >= LONG_STEP { 3 } else { BLOCK };
                Phase::Trial(0)
            }
            Phase::Trial(k) if k + 1 < ROUNDS * self.samples.len() * self.block => Phase::Trial(k + 1),
            Phase::Trial(_) => {
                self.choose(pools);
                Phase::Chosen(0)
            }
            Phase::Chosen(n) if n + 1 < self.recheck => Phase::Chosen(n + 1),
            Phase::Chosen(_) => Phase::Trial(0),
        };
    }

    fn choose(&mut self, pools: &[Pool]) {
        let medians: Vec<Duration> = self.samples.iter_mut().map(|t| median(t)).collect();
        let pick = pick(&medians);
        if !self.decided || pick != self.chosen {
            let timings: Vec<String> = pools
                .iter()
                .zip(&medians)
                .map(|(p, m)| format!("{:.3} ms on {}", m.as_secs_f64() * 1e3, plural(p.threads)))
                .collect();
            let again = if self.decided { ", changed by a later trial" } else { "" };
            log::info!(
                "compute threads for {}: {}{again} (median step {}; blocks of {} steps, alternated)",
                self.what,
                pools[pick].threads,
                timings.join(", "),
                self.block
            );
        }
        self.chosen = pick;
        self.decided = true;
        self.samples.iter_mut().for_each(Vec::clear);
    }
}

fn plural(threads: usize) -> String {
    if threads == 1 { "1 thread".into() } else { format!("{threads} threads") }
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// The candidate to keep, from each candidate's median step (largest pool first): the
/// fastest, or a later (smaller) one within [`TIE`] of it.
fn pick(medians: &[Duration]) -> usize {
    let best = medians.iter().min().copied().unwrap_or_default().as_secs_f64();
    medians.iter().rposition(|m| m.as_secs_f64() <= best * TIE).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[f64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_secs_f64(m / 1e3)).collect()
    }

    #[test]
    fn the_fastest_pool_is_kept_and_fewer_threads_win_a_tie() {
        assert_eq!(pick(&ms(&[1.0, 1.5])), 0, "two threads clearly faster");
        assert_eq!(pick(&ms(&[1.0, 0.9])), 1, "one thread faster");
        assert_eq!(pick(&ms(&[1.0, 1.015])), 1, "within 2 %: one thread");
        assert_eq!(pick(&ms(&[2.0, 1.0, 1.01, 3.0])), 2, "the smallest within the tie");
        assert_eq!(pick(&[]), 0);
    }

    #[test]
    fn the_median_ignores_a_stall() {
        assert_eq!(median(&mut ms(&[1.0, 50.0, 1.1, 0.9, 1.2])), Duration::from_secs_f64(1.1e-3));
    }

    /// The timing tests share the process's pools, so they take turns: two at once would
    /// each wait for the other's step on the one-thread pool.
    fn alone() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Steps enough for the warm-up and one trial of short steps.
    fn first_trial() -> usize {
        WARMUP as usize + ROUNDS * pools().len() * BLOCK
    }

    /// A step that is slower on more threads (as the MLP's can be on a VM) ends on the
    /// smallest pool, and every step ran inside a candidate pool.
    #[test]
    fn a_step_that_more_threads_slow_down_ends_on_one_thread() {
        let _alone = alone();
        let mut chooser = StepThreads::new("a test");
        if pools().len() < 2 {
            return; // RAYON_NUM_THREADS or a one-CPU machine: nothing to choose.
        }
        for _ in 0..first_trial() {
            assert_eq!(chooser.chosen_threads(), None);
            let inside = chooser.run(|| {
                std::thread::sleep(Duration::from_micros(2000 * rayon::current_num_threads() as u64));
                rayon::current_thread_index().is_some()
            });
            assert!(inside, "the step ran outside the pools");
        }
        assert_eq!(chooser.chosen_threads(), Some(1));
    }

    /// More threads are kept where they help, and a later trial moves to fewer when the
    /// step changes (the machine got busy).
    #[test]
    fn a_later_trial_follows_a_change() {
        let _alone = alone();
        let mut chooser = StepThreads::with_recheck("a test", 5);
        if pools().len() < 2 {
            return;
        }
        let speeds_up = |threads: usize| Duration::from_micros(4000 / threads as u64);
        for _ in 0..first_trial() {
            chooser.run(|| std::thread::sleep(speeds_up(rayon::current_num_threads())));
        }
        assert_eq!(chooser.chosen_threads(), Some(pools()[0].threads));
        for _ in 0..(5 + ROUNDS * pools().len() * BLOCK) {
            chooser.run(|| std::thread::sleep(Duration::from_micros(2000 * rayon::current_num_threads() as u64)));
        }
        assert_eq!(chooser.chosen_threads(), Some(1));
    }

    #[test]
    fn a_step_already_in_a_pool_runs_there() {
        let mut chooser = StepThreads::new("a test");
        let outer = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a pool");
        let seen = outer.install(|| chooser.run(rayon::current_num_threads));
        assert_eq!(seen, 3);
    }
}
