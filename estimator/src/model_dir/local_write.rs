//! Crash-safe writes on the local filesystem.
//!
//! `object_store`'s local backend stages a put in a temporary file and renames it, but never fsyncs, so
//! after a power loss the rename can survive while the data does not: a zero-length checkpoint under its
//! final name. Here the staged file is fsynced before it is published and the directory after, which is
//! what makes "the previous checkpoint stays loadable" hold on a local disk as it does on S3.
//!
//! Staged files are named `<dest>#<digits>`, the pattern `object_store` itself uses, so listings through
//! the store never show them.

use super::error::{ModelDirError, Result};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalPutMode {
    Overwrite,
    /// Fails with `Ok(false)` when `dest` exists (a hard link refuses to replace, unlike rename).
    CreateNew,
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ModelDirError + 'a {
    move |source| ModelDirError::LocalIo { op, path: path.to_path_buf(), source }
}

fn staging_path(dest: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut staged = dest.as_os_str().to_owned();
    staged.push(format!("#{}{n:06}", std::process::id()));
    PathBuf::from(staged)
}

/// Writes `data` to `dest` atomically and durably. Returns false only in `CreateNew` mode when `dest`
/// already existed (nothing was changed then).
pub(crate) fn write_atomic(dest: &Path, data: &[u8], mode: LocalPutMode) -> Result<bool> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_error("create directory", parent))?;
    let staged = staging_path(dest);
    let written = stage_and_publish(&staged, dest, data, mode);
    if !matches!(written, Ok(true)) || mode == LocalPutMode::CreateNew {
        // After a hard link the staged name is just a second name; otherwise it is debris.
        let _ = std::fs::remove_file(&staged);
    }
    if matches!(written, Ok(true)) {
        sync_dir(parent)?;
    }
    written
}

fn stage_and_publish(staged: &Path, dest: &Path, data: &[u8], mode: LocalPutMode) -> Result<bool> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(staged).map_err(io_error("create", staged))?;
    file.write_all(data).map_err(io_error("write", staged))?;
    file.sync_all().map_err(io_error("fsync", staged))?;
    drop(file);
    match mode {
        LocalPutMode::Overwrite => {
            std::fs::rename(staged, dest).map_err(io_error("rename into", dest))?;
            Ok(true)
        }
        LocalPutMode::CreateNew => match std::fs::hard_link(staged, dest) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_error("link into", dest)(e)),
        },
    }
}

/// Makes a rename in `dir` durable. Directories cannot be opened for fsync on every platform; where
/// they cannot, the rename is as durable as the OS makes it.
fn sync_dir(dir: &Path) -> Result<()> {
    match File::open(dir) {
        Ok(handle) => match handle.sync_all() {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied | ErrorKind::InvalidInput) => Ok(()),
            Err(e) => Err(io_error("fsync directory", dir)(e)),
        },
        Err(_) => Ok(()),
    }
}

/// True for a `<name>#<digits>` staging file left by a writer (ours or `object_store`'s).
pub(crate) fn is_staging_file(file_name: &str) -> bool {
    match file_name.rsplit_once('#') {
        Some((_, suffix)) => !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// Whether the process that staged `file_name` (ours: `#<pid><6-digit counter>`) is known to
/// be gone, which makes the file debris of an interrupted save whatever its age. `false`
/// when the name carries no pid, or the pid is alive (a save in progress, or a reused pid:
/// the age rule removes those later).
pub(crate) fn writer_is_gone(file_name: &str) -> bool {
    let Some((_, suffix)) = file_name.rsplit_once('#') else { return false };
    let Some(pid) = suffix.get(..suffix.len().saturating_sub(6)).and_then(|p| p.parse::<libc::pid_t>().ok()) else {
        return false;
    };
    if pid <= 0 || pid == std::process::id() as libc::pid_t {
        return false;
    }
    // SAFETY: signal 0 only asks whether the process exists.
    let alive =
        unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    !alive
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrite_then_create_new_refuses() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("sub/obj");
        assert!(write_atomic(&dest, b"one", LocalPutMode::Overwrite)?);
        assert!(write_atomic(&dest, b"two", LocalPutMode::Overwrite)?);
        assert_eq!(std::fs::read(&dest)?, b"two");
        assert!(!write_atomic(&dest, b"three", LocalPutMode::CreateNew)?);
        assert_eq!(std::fs::read(&dest)?, b"two");
        assert!(write_atomic(&dir.path().join("new"), b"x", LocalPutMode::CreateNew)?);
        // No staging debris is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path().join("sub"))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        assert_eq!(names, vec!["obj".to_string()]);
        assert!(
            !std::fs::read_dir(dir.path())?.any(|e| e.is_ok_and(|e| is_staging_file(&e.file_name().to_string_lossy())))
        );
        Ok(())
    }

    #[test]
    fn a_staging_file_of_a_dead_writer_is_recognised() -> anyhow::Result<()> {
        let mut child = std::process::Command::new("true").spawn()?;
        let dead = child.id();
        child.wait()?;
        assert!(writer_is_gone(&format!("model.ckpt-5.safetensors#{dead}000003")));
        // This process is alive; names without a pid say nothing.
        assert!(!writer_is_gone(&staging_path(Path::new("x")).to_string_lossy()));
        assert!(!writer_is_gone("checkpoint#12"));
        assert!(!writer_is_gone("checkpoint"));
        Ok(())
    }

    #[test]
    fn staging_names_are_recognised() {
        assert!(is_staging_file("checkpoint#12345"));
        assert!(!is_staging_file("checkpoint"));
        assert!(!is_staging_file("a#b1"));
        assert!(!is_staging_file("a#"));
        let staged = staging_path(Path::new("/d/model.ckpt-1.safetensors"));
        assert!(is_staging_file(&staged.to_string_lossy()));
    }
}
