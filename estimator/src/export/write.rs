//! Writes an export so that no reader sees it half-written.

use crate::{EstimatorError, Result, model_dir::ModelDir};
use std::io::Write;
use std::path::Path;

/// Writes `files` and then `manifest` as `base/name/`. Refuses to replace an export that
/// exists (exports are immutable; a new one gets a new name).
pub(crate) fn write_export(
    base: &ModelDir,
    name: &str,
    files: &[(&str, Vec<u8>)],
    manifest: Vec<u8>,
) -> Result<String> {
    let manifest_name = super::MANIFEST;
    match base.local_root() {
        Some(root) => write_local(root, name, files, (manifest_name, &manifest))?,
        None => {
            if base.exists(&format!("{name}/{manifest_name}"))? {
                return Err(exists(&base.url_of(name)));
            }
            for (file, data) in files {
                base.put(&format!("{name}/{file}"), data.clone())?;
            }
            // The commit point: an export without its manifest does not exist to readers.
            base.put(&format!("{name}/{manifest_name}"), manifest)?;
        }
    }
    Ok(base.url_of(name))
}

fn exists(url: &str) -> EstimatorError {
    EstimatorError::Other(format!("the export {url} already exists; exports are never overwritten"))
}

fn io(what: &str, path: &Path, e: std::io::Error) -> EstimatorError {
    EstimatorError::Other(format!("cannot {what} {}: {e}", path.display()))
}

/// Builds the directory under a hidden temporary name beside it, syncs it, and renames it
/// into place: the rename is atomic, so the export appears whole or not at all.
fn write_local(root: &Path, name: &str, files: &[(&str, Vec<u8>)], manifest: (&str, &[u8])) -> Result<()> {
    let target = root.join(name);
    if target.exists() {
        return Err(exists(&target.display().to_string()));
    }
    let parent = target.parent().unwrap_or(root).to_path_buf();
    std::fs::create_dir_all(&parent).map_err(|e| io("create", &parent, e))?;
    let leaf = target.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{leaf}.tmp-"))
        .tempdir_in(&parent)
        .map_err(|e| io("create a staging directory in", &parent, e))?;
    for (file, data) in files.iter().map(|(f, d)| (*f, d.as_slice())).chain(std::iter::once(manifest)) {
        let path = staging.path().join(file);
        let mut f = std::fs::File::create(&path).map_err(|e| io("create", &path, e))?;
        f.write_all(data).map_err(|e| io("write", &path, e))?;
        f.sync_all().map_err(|e| io("sync", &path, e))?;
    }
    let staged = staging.keep();
    std::fs::File::open(&staged).and_then(|d| d.sync_all()).map_err(|e| io("sync", &staged, e))?;
    if let Err(e) = std::fs::rename(&staged, &target) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(io("move the export into", &target, e));
    }
    std::fs::File::open(&parent).and_then(|d| d.sync_all()).map_err(|e| io("sync", &parent, e))?;
    Ok(())
}
