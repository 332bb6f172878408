//! What the fuzz tests share: a seeded generator, running the engine on a hostile case
//! with a time limit, reporting how it ended and the memory it took, and running the cases
//! on every core.

use anyhow::{Context, Result, bail};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// xorshift64*: enough randomness for mutations, and the same sequence everywhere.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// How a case ended: its exit code and the peak resident memory of the process.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    pub code: i32,
    pub peak_rss_bytes: u64,
}

/// Runs the engine; a panic or a signal (an abort) is a failure. A legitimately slow job (a
/// mutant with a layer of 65536 units) gets SIGTERM at `limit` and must then stop, with its
/// checkpoint, within a grace period: only one that ignores it hangs.
pub fn survives(args: &[&str], limit: Duration) -> Result<Ended> {
    let mut child = Command::new(super::engine_binary()?)
        .args(args)
        .current_dir(super::repo_root())
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = child.stderr.take().context("no stderr")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let pid = child.id() as libc::pid_t;
    let deadline = Instant::now() + limit;
    let grace = Duration::from_secs(180);
    let mut terminated = None;
    // Reaped with wait4, which also reports the child's peak memory (std's wait does not).
    let (status, peak) = loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid out-parameter for wait4.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child without blocking; the pointers outlive the call.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid {
            break (status, usage.ru_maxrss.max(0) as u64 * 1024);
        }
        if reaped < 0 {
            bail!("cannot wait for the engine: {}", std::io::Error::last_os_error());
        }
        match terminated {
            None if Instant::now() > deadline => {
                // SAFETY: kill has no memory effects.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                terminated = Some(Instant::now());
            }
            Some(at) if at.elapsed() > grace => {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                bail!("still running {grace:?} after SIGTERM (sent after {limit:?})");
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = reader.join().unwrap_or_default();
    let tail: String =
        stderr.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    let exited = libc::WIFEXITED(status);
    let code = libc::WEXITSTATUS(status);
    if stderr.contains("panicked at") || (exited && code == 101) {
        bail!("it panicked ({code}):\n{tail}");
    }
    if !exited {
        bail!("it was killed by signal {}, an abort:\n{tail}", libc::WTERMSIG(status));
    }
    Ok(Ended { code, peak_rss_bytes: peak })
}

/// `case(0..count)` on one thread per core, each case its own engine processes, the results
/// in index order. Cases are made before they run (the generator's sequence stays the
/// seed's), so running them side by side changes which cases run on which core, not which
/// cases there are: the fuzz tests were a sequence of single-threaded `engine plan` calls,
/// and the longest binaries of the suite. The first error in index order is returned; once
/// one fails, no new case starts.
pub fn each_case<R: Send>(count: usize, case: impl Fn(usize) -> Result<R> + Sync) -> Result<Vec<R>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, count.max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Result<R>>>> = Mutex::new((0..count).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= count {
                        break;
                    }
                    let result = case(index);
                    failed.fetch_or(result.is_err(), Ordering::Relaxed);
                    results.lock().unwrap_or_else(|e| e.into_inner())[index] = Some(result);
                }
            });
        }
    });
    // Cases after a failure may not have run: skipped, while every earlier one has.
    results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().flatten().collect()
}
