//! The compute pool a step runs on, on the CPU.
//!
//! The whole step runs inside the pool (`install`), so its kernels fork their parallel
//! parts from a worker of that pool and see its thread count; before, each parallel op was
//! injected from the caller's thread, which then slept on a latch until it finished, and
//! the MLP at two threads ran at 158–175k examples/s against 221–249k inside the pool. A
//! caller already inside a rayon pool (an embedding program that chose its threads) runs
//! the step there.
//!
//! With `ENGINE_STEP_THREADS=timed` a session also chooses its pool by timing its own
//! steps: after a warm-up, blocks of steps on all the compute threads and on halves of
//! them, alternated, the shortest median kept (fewer threads within 2 %), again every
//! 1000 steps. It is off by default because on the 2-vCPU VM it was built on, the trial
//! itself moved what it measured: after a block on one thread, the two-thread pool ran at
//! 0.8–0.9 ms per MLP step instead of 0.5 for tens to hundreds of steps (the idle vCPU
//! seemed to come back slower), and 3 runs in 10 chose one thread, 30 % slower for the
//! rest of the run. Changing the pool changes no result, so a choice made by timing is
//! safe: reductions split their partial sums by the machine's CPUs, not by the pool's
//! threads ([`HostCpu::sum_parts`](crate::HostCpu::sum_parts), `tests/thread_count.rs`).

use crate::ComputeThreads;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The first trial waits for this many steps on the largest pool and for [`WARMUP_TIME`]:
/// the first steps allocate and fault in their buffers, and the loop's start-up work (the
/// first checkpoint, the summaries' graph, the input's shuffle buffer) runs beside them on
/// the other CPUs. Timed in that window, the MLP's two-thread step measured 0.80–0.90 ms
/// in some runs against 0.55 ms once it was over, and the trial chose one thread.
const WARMUP: u32 = 10;
const WARMUP_TIME: Duration = Duration::from_millis(250);
/// Before its first trial each other pool runs this many untimed steps: a pool's first
/// steps on new threads measured 1.5–3× its later ones (the threads' packing buffers).
const PRIME: usize = 3;
/// A trial runs each candidate for a block of consecutive steps, in this many rounds (the
/// order reversed every other round). Switching pools every step measured both pools
/// slower than either ran alone (the MLP at 0.93 ms on each, against 0.55 and 0.73 ms
/// unswitched), so candidates run in blocks, and a block's first steps are not timed:
/// at least [`SETTLE`] of them and at least [`SETTLE_TIME`]. On the VM the two-thread
/// pool, started after a block on one thread, ran 10–12 steps (about 10 ms) at 0.8 ms
/// before it was back at 0.55: the idle vCPU had to be woken and kept busy again.
const ROUNDS: usize = 2;
const SETTLE: usize = 2;
const SETTLE_TIME: Duration = Duration::from_millis(20);
/// Timed steps per block for steps under [`LONG_STEP`]; 2 for longer ones (one untimed),
/// where a step's noise is small against it and a trial on a slow pool costs more.
const TIMED: usize = 6;
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
    pools: &'static [Pool],
    phase: Phase,
    /// The pool the steps run on between trials, once the first chose it.
    chosen: Option<usize>,
    /// Timed steps per block, set from the warm-up's last step.
    timed: usize,
    samples: Vec<Vec<Duration>>,
    recheck: u32,
    /// What the choice was made for, in its log line ("training steps").
    what: &'static str,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Steps run, and when the first began.
    Warmup(u32, Option<Instant>),
    /// Step `k` of the other pools' untimed first steps.
    Prime(usize),
    /// A trial: block `block` (round `block / candidates`), its `steps` so far since
    /// `since`, `timed` of them sampled.
    Trial {
        block: usize,
        steps: usize,
        timed: usize,
        since: Option<Instant>,
    },
    Chosen(u32),
}

impl StepThreads {
    pub fn new(what: &'static str) -> Self {
        Self::with(what, RECHECK, pools())
    }

    fn with(what: &'static str, recheck: u32, pools: &'static [Pool]) -> Self {
        // One pool is run without any of this (`run`): it is the choice already.
        StepThreads {
            pools,
            phase: Phase::Warmup(0, None),
            chosen: (pools.len() == 1).then_some(0),
            timed: TIMED,
            samples: vec![Vec::new(); pools.len()],
            recheck,
            what,
        }
    }

    /// The threads the steps run on, once a trial chose them.
    pub fn chosen_threads(&self) -> Option<usize> {
        self.chosen.and_then(|i| self.pools.get(i)).map(|p| p.threads)
    }

    /// Runs one step on the pool its turn falls to.
    pub fn run<R: Send>(&mut self, step: impl FnOnce() -> R + Send) -> R {
        let pools = self.pools;
        if pools.is_empty() || rayon::current_thread_index().is_some() {
            return step();
        }
        if let [only] = pools {
            return only.pool.install(step);
        }
        let (pool, timed) = self.turn();
        let start = Instant::now();
        if let Phase::Warmup(_, first @ None) | Phase::Trial { since: first @ None, .. } = &mut self.phase {
            *first = Some(start);
        }
        let out = pools[pool].pool.install(step);
        self.after(pool, timed, start.elapsed());
        out
    }

    /// The pool of the next step, and whether its time is a sample.
    fn turn(&self) -> (usize, bool) {
        match self.phase {
            Phase::Warmup(..) => (0, false),
            Phase::Prime(k) => (1 + k / PRIME, false),
            Phase::Chosen(_) => (self.chosen.unwrap_or(0), false),
            Phase::Trial { block, steps, since, .. } => {
                let candidates = self.samples.len();
                let (round, slot) = (block / candidates, block % candidates);
                let pool = if round % 2 == 1 { candidates - 1 - slot } else { slot };
                let settled = steps >= SETTLE && since.is_some_and(|s| s.elapsed() >= SETTLE_TIME);
                (pool, settled)
            }
        }
    }

    fn after(&mut self, pool: usize, timed: bool, took: Duration) {
        if timed {
            self.samples[pool].push(took);
        }
        self.phase = match self.phase {
            Phase::Warmup(n, first) if n + 1 < WARMUP || first.is_some_and(|f| f.elapsed() < WARMUP_TIME) => {
                Phase::Warmup(n + 1, first)
            }
            Phase::Warmup(..) => {
                self.timed = if took >= LONG_STEP { 2 } else { TIMED };
                Phase::Prime(0)
            }
            Phase::Prime(k) if k + 1 < PRIME * (self.samples.len() - 1) => Phase::Prime(k + 1),
            Phase::Prime(_) => Phase::Trial { block: 0, steps: 0, timed: 0, since: None },
            Phase::Trial { block, steps, timed: sampled, since } => {
                let sampled = sampled + usize::from(timed);
                if sampled < self.timed {
                    Phase::Trial { block, steps: steps + 1, timed: sampled, since }
                } else if block + 1 < ROUNDS * self.samples.len() {
                    Phase::Trial { block: block + 1, steps: 0, timed: 0, since: None }
                } else {
                    self.choose();
                    Phase::Chosen(0)
                }
            }
            Phase::Chosen(n) if n + 1 < self.recheck => Phase::Chosen(n + 1),
            Phase::Chosen(_) => Phase::Trial { block: 0, steps: 0, timed: 0, since: None },
        };
    }

    fn choose(&mut self) {
        let medians: Vec<Duration> = self.samples.iter_mut().map(|t| median(t)).collect();
        let pick = pick(&medians);
        if self.chosen != Some(pick) {
            let timings: Vec<String> = self
                .pools
                .iter()
                .zip(&medians)
                .map(|(p, m)| format!("{:.3} ms on {}", m.as_secs_f64() * 1e3, plural(p.threads)))
                .collect();
            let again = if self.chosen.is_some() { ", changed by a later trial" } else { "" };
            log::info!(
                "compute threads for {}: {}{again} (median step {}; {} steps each, alternated in blocks)",
                self.what,
                self.pools[pick].threads,
                timings.join(", "),
                ROUNDS * self.timed
            );
        }
        self.chosen = Some(pick);
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

    /// Candidate pools of 2 and 1 threads, whatever the process's default (which times
    /// nothing unless `ENGINE_STEP_THREADS=timed`).
    fn two_and_one() -> &'static [Pool] {
        static POOLS: OnceLock<Vec<Pool>> = OnceLock::new();
        POOLS.get_or_init(|| {
            [2, 1]
                .map(|threads| Pool {
                    threads,
                    pool: rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a test pool"),
                })
                .into()
        })
    }

    /// Runs steps that take `step(threads)` until the warm-up and the first trial are over.
    fn through_first_trial(chooser: &mut StepThreads, step: impl Fn(usize) -> Duration + Sync) {
        let start = Instant::now();
        while chooser.chosen_threads().is_none() {
            assert!(start.elapsed() < Duration::from_secs(20), "no choice after {:?}", chooser.phase);
            let inside = chooser.run(|| {
                std::thread::sleep(step(rayon::current_num_threads()));
                rayon::current_thread_index().is_some()
            });
            assert!(inside, "the step ran outside the pools");
        }
    }

    /// A step that is slower on more threads (as the MLP's can be on a VM) ends on the
    /// smallest pool, and every step ran inside a candidate pool.
    #[test]
    fn a_step_that_more_threads_slow_down_ends_on_one_thread() {
        let _alone = alone();
        let mut chooser = StepThreads::with("a test", RECHECK, two_and_one());
        let start = Instant::now();
        through_first_trial(&mut chooser, |threads| Duration::from_micros(2000 * threads as u64));
        assert!(start.elapsed() >= WARMUP_TIME, "chosen before the warm-up was over");
        assert_eq!(chooser.chosen_threads(), Some(1));
    }

    /// More threads are kept where they help, and a later trial moves to fewer when the
    /// step changes (the machine got busy).
    #[test]
    fn a_later_trial_follows_a_change() {
        let _alone = alone();
        let mut chooser = StepThreads::with("a test", 5, two_and_one());
        through_first_trial(&mut chooser, |threads| Duration::from_micros(4000 / threads as u64));
        assert_eq!(chooser.chosen_threads(), Some(2));
        let start = Instant::now();
        while chooser.chosen_threads() != Some(1) {
            assert!(start.elapsed() < Duration::from_secs(20), "still on {:?} threads", chooser.chosen_threads());
            chooser.run(|| std::thread::sleep(Duration::from_micros(2000 * rayon::current_num_threads() as u64)));
        }
    }

    #[test]
    fn a_step_already_in_a_pool_runs_there() {
        let mut chooser = StepThreads::new("a test");
        let outer = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a pool");
        let seen = outer.install(|| chooser.run(rayon::current_num_threads));
        assert_eq!(seen, 3);
    }
}
