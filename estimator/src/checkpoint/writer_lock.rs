//! One writer per model dir: `writer.lock`, held by the chief while it trains.
//!
//! Two training jobs on one model dir overwrite each other's checkpoints and state file and
//! one of them dies later with an unrelated-looking "does not exist". The chief therefore
//! takes a lease object before it writes anything and renews it while it trains; a second
//! writer is refused at once, naming the holder. The lease is given up when training ends.
//!
//! A holder that died without giving it up (kill -9, a lost machine) must not block the
//! restart that follows: on the same host its process id is checked directly (a dead
//! process's lease is taken over at once), elsewhere the lease lapses `ttl` after its last
//! renewal. Within one process a second acquisition (an estimator trained twice, or two in
//! one test) takes the lease over; each holder gives up only its own.

use super::error::{CheckpointError, Result};
use super::lease::unix_now;
use crate::model_dir::{ModelDir, PutOutcome};
use crate::summary::hostname;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The lease object's name in the model dir.
pub const WRITER_LOCK: &str = "writer.lock";

/// What the lease object records about its holder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Holder {
    host: String,
    pid: u32,
    /// Which acquisition this is: a holder removes the lease only if it is still its own.
    token: String,
    /// What the holder is (`engine run specs/x.ron`), for the refusal message.
    what: String,
    started: f64,
    renewed: f64,
    ttl_secs: f64,
}

impl Holder {
    fn describe(&self) -> String {
        format!(
            "{} (pid {} on {}, since {:.0} s ago)",
            self.what,
            self.pid,
            self.host,
            (unix_now() - self.started).max(0.0)
        )
    }

    /// Whether the holder may still be writing.
    fn alive(&self) -> bool {
        if self.host == hostname() {
            return process_alive(self.pid);
        }
        unix_now() < self.renewed + self.ttl_secs
    }
}

/// The held lease; dropping it stops the renewals and removes the lease object if it is
/// still this holder's.
pub struct WriterLock {
    dir: ModelDir,
    token: String,
    stop: Arc<(Mutex<bool>, Condvar)>,
    renewer: Option<JoinHandle<()>>,
    lost: Arc<AtomicBool>,
}

impl WriterLock {
    /// Takes the model dir's writer lease for `what`, renewed every `ttl / 3`, or fails
    /// naming the live holder.
    pub fn acquire(dir: &ModelDir, what: &str, ttl: Duration) -> Result<WriterLock> {
        let token = format!("{}-{}-{:.6}", hostname(), std::process::id(), unix_now());
        let now = unix_now();
        let mine = Holder {
            host: hostname(),
            pid: std::process::id(),
            token: token.clone(),
            what: what.to_string(),
            started: now,
            renewed: now,
            ttl_secs: ttl.as_secs_f64(),
        };
        let bytes = |h: &Holder| serde_json::to_vec(h).unwrap_or_default();
        let written = match dir.get_if_exists(WRITER_LOCK)? {
            None => dir.put_if_absent(WRITER_LOCK, bytes(&mine))?,
            Some(object) => {
                let holder: Option<Holder> = serde_json::from_slice(&object.data).ok();
                match holder {
                    Some(h) if h.alive() && !(h.host == mine.host && h.pid == mine.pid) => {
                        return Err(locked(dir, &h));
                    }
                    Some(h) if h.pid != mine.pid || h.host != mine.host => {
                        log::warn!(
                            "{} was held by {}, which is gone: taking it over",
                            dir.url_of(WRITER_LOCK),
                            h.describe()
                        );
                        dir.put_if_match(WRITER_LOCK, bytes(&mine), &object.version)?
                    }
                    // Our own process, or an unreadable leftover: ours now.
                    _ => dir.put_if_match(WRITER_LOCK, bytes(&mine), &object.version)?,
                }
            }
        };
        if let PutOutcome::Conflict = written {
            // Another writer got there between our read and our write.
            let current = dir.get_if_exists(WRITER_LOCK)?.and_then(|o| serde_json::from_slice::<Holder>(&o.data).ok());
            return Err(match current {
                Some(h) => locked(dir, &h),
                None => CheckpointError::Locked {
                    url: dir.url_of(WRITER_LOCK),
                    holder: "another writer (it changed while this one took it)".into(),
                },
            });
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (dir, stop, lost, mut mine) = (dir.clone(), stop.clone(), lost.clone(), mine);
            std::thread::Builder::new()
                .name("writer-lock".into())
                .spawn(move || renew(&dir, &stop, &lost, &mut mine, ttl / 3))
                .ok()
        };
        Ok(WriterLock { dir: dir.clone(), token, stop, renewer, lost })
    }

    /// Whether another writer took the lease over while this one held it.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        {
            let (stopped, wake) = &*self.stop;
            if let Ok(mut s) = stopped.lock() {
                *s = true;
            }
            wake.notify_all();
        }
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        let ours = self
            .dir
            .get_if_exists(WRITER_LOCK)
            .ok()
            .flatten()
            .and_then(|o| serde_json::from_slice::<Holder>(&o.data).ok())
            .is_some_and(|h| h.token == self.token);
        if ours && let Err(e) = self.dir.delete(WRITER_LOCK) {
            log::warn!("cannot remove {}: {e}", self.dir.url_of(WRITER_LOCK));
        }
    }
}

/// Renews the lease until stopped; stops renewing (and says so) once another holder owns it.
fn renew(dir: &ModelDir, stop: &(Mutex<bool>, Condvar), lost: &AtomicBool, mine: &mut Holder, every: Duration) {
    let (stopped, wake) = stop;
    let Ok(mut guard) = stopped.lock() else { return };
    loop {
        match wake.wait_timeout(guard, every.max(Duration::from_millis(10))) {
            Ok((g, _)) => guard = g,
            Err(_) => return,
        }
        if *guard {
            return;
        }
        let current = dir.get_if_exists(WRITER_LOCK).ok().flatten();
        let owner = current.as_ref().and_then(|o| serde_json::from_slice::<Holder>(&o.data).ok());
        match (current, owner) {
            (Some(object), Some(h)) if h.token == mine.token => {
                mine.renewed = unix_now();
                let _ = dir.put_if_match(WRITER_LOCK, serde_json::to_vec(mine).unwrap_or_default(), &object.version);
            }
            (_, Some(h)) if h.pid == mine.pid && h.host == mine.host => return,
            (_, h) => {
                lost.store(true, Ordering::Relaxed);
                let by = h.map_or_else(|| "nobody (it was removed)".to_string(), |h| h.describe());
                log::error!("{} is now held by {by}: another writer took this model dir over", dir.url_of(WRITER_LOCK));
                return;
            }
        }
    }
}

fn locked(dir: &ModelDir, holder: &Holder) -> CheckpointError {
    CheckpointError::Locked { url: dir.url_of(WRITER_LOCK), holder: holder.describe() }
}

/// Whether process `pid` exists on this host (signal 0 checks without sending anything).
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: kill with signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder_of(dir: &ModelDir) -> Option<Holder> {
        dir.get_if_exists(WRITER_LOCK).ok().flatten().and_then(|o| serde_json::from_slice(&o.data).ok())
    }

    #[test]
    fn a_live_holder_elsewhere_is_named_and_a_dead_one_is_taken_over() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = ModelDir::open(&tmp.path().to_string_lossy())?;
        // A holder on another host that renewed just now: refused, named.
        let other = Holder {
            host: "other-host".into(),
            pid: 4242,
            token: "t".into(),
            what: "engine run specs/x.ron".into(),
            started: unix_now(),
            renewed: unix_now(),
            ttl_secs: 60.0,
        };
        dir.put(WRITER_LOCK, serde_json::to_vec(&other)?)?;
        let err = WriterLock::acquire(&dir, "test", Duration::from_secs(60)).err().map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("engine run specs/x.ron (pid 4242 on other-host") && err.contains("writer.lock"), "{err}");
        // Lapsed: taken over.
        dir.put(WRITER_LOCK, serde_json::to_vec(&Holder { renewed: unix_now() - 120.0, ..other.clone() })?)?;
        let lock = WriterLock::acquire(&dir, "test", Duration::from_secs(60))?;
        assert_eq!(holder_of(&dir).map(|h| h.pid), Some(std::process::id()));
        drop(lock);
        assert!(holder_of(&dir).is_none(), "the lease outlived its holder");
        // On this host, a process that is gone: taken over at once.
        let gone = Holder { host: hostname(), pid: u32::MAX / 2, ..other };
        dir.put(WRITER_LOCK, serde_json::to_vec(&gone)?)?;
        let lock = WriterLock::acquire(&dir, "test", Duration::from_secs(60))?;
        assert!(!lock.lost());
        Ok(())
    }

    #[test]
    fn the_same_process_takes_over_and_each_holder_removes_only_its_own() -> anyhow::Result<()> {
        let dir = ModelDir::open("memory://writer-lock-twice/run")?;
        let first = WriterLock::acquire(&dir, "first", Duration::from_millis(30))?;
        let second = WriterLock::acquire(&dir, "second", Duration::from_millis(30))?;
        std::thread::sleep(Duration::from_millis(60));
        drop(first);
        assert_eq!(holder_of(&dir).map(|h| h.what), Some("second".into()));
        drop(second);
        assert!(holder_of(&dir).is_none());
        Ok(())
    }
}
