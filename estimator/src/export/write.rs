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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_export_appears_whole_and_is_never_replaced() -> Result<()> {
        let tmp = tempfile::tempdir().map_err(|e| EstimatorError::Other(e.to_string()))?;
        let base = ModelDir::open(&tmp.path().to_string_lossy())?;
        let files = [("a.bin", vec![1u8, 2, 3])];
        let at = write_export(&base, "exports/1", &files, b"{}".to_vec())?;
        let dir = tmp.path().join("exports/1");
        assert!(at.ends_with("exports/1"), "{at}");
        assert_eq!(std::fs::read(dir.join("a.bin")).ok(), Some(vec![1, 2, 3]));
        assert!(dir.join(crate::export::MANIFEST).is_file());
        let e = write_export(&base, "exports/1", &files, b"{}".to_vec()).unwrap_err().to_string();
        assert!(e.contains("already exists"), "{e}");
        // Nothing but the export: the staging directory was renamed, not copied.
        let left: Vec<_> = std::fs::read_dir(tmp.path().join("exports")).into_iter().flatten().flatten().collect();
        assert_eq!(left.len(), 1);
        Ok(())
    }

    #[test]
    fn on_an_object_store_the_manifest_is_written_last() -> Result<()> {
        let base = ModelDir::open("memory://export-write-test/base")?;
        write_export(&base, "7", &[("a.bin", vec![9u8])], b"{}".to_vec())?;
        let names: Vec<String> = base.list("7")?.into_iter().map(|i| i.name).collect();
        assert_eq!(names, ["7/a.bin", "7/saved_model.json"]);
        assert!(write_export(&base, "7", &[], b"{}".to_vec()).is_err());
        Ok(())
    }
}
