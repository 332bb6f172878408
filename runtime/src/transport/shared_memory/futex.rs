//! Sleeping on a word of the shared segment until another process changes it.
//!
//! On Linux this is the futex system call without `FUTEX_PRIVATE_FLAG`, so that it works
//! across processes on a shared mapping: a waiter costs no CPU, which matters when the
//! processes of a job share fewer cores than they have threads (each task's compute
//! thread would otherwise lose time to its own communication thread polling). Elsewhere a
//! short nap stands in for it.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout` (spurious returns are fine: the
/// caller re-checks its condition).
#[cfg(target_os = "linux")]
pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let timeout = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the kernel only
    // compares it with `expected` and sleeps; the timeout pointer is valid.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &timeout as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every process sleeping on `word`.
#[cfg(target_os = "linux")]
pub(super) fn wake_all(word: &AtomicU32) {
    // SAFETY: as for `wait`; FUTEX_WAKE only reads the address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let _ = (word, expected);
    std::thread::sleep(timeout.min(Duration::from_micros(20)));
}

#[cfg(not(target_os = "linux"))]
pub(super) fn wake_all(word: &AtomicU32) {
    let _ = word;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    #[test]
    fn a_sleeper_wakes_when_the_word_changes_and_not_before_its_timeout_otherwise() {
        let word = Arc::new(AtomicU32::new(0));
        let start = Instant::now();
        wait(&word, 1, Duration::from_secs(5));
        assert!(start.elapsed() < Duration::from_secs(1), "a stale expectation returns at once");
        let sleeper = {
            let word = word.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                while word.load(Ordering::Acquire) == 0 {
                    wait(&word, 0, Duration::from_secs(5));
                }
                start.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        word.store(1, Ordering::Release);
        wake_all(&word);
        let slept = sleeper.join().unwrap_or(Duration::MAX);
        assert!(slept < Duration::from_secs(4), "woken after {slept:?}");
    }
}
