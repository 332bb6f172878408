//! Input files on object stores: `s3://bucket/data/train.csv`, or a pattern in the last
//! segment (`s3://bucket/data/part-*.tfrecord`). They are fetched once into a local cache
//! (`$TMPDIR/engine-inputs/<key>/`, the key naming the endpoint, the directory and every
//! matched object's size and modification time, so a replaced object is fetched again)
//! and then read like local files, so every source and its exact resumption work
//! unchanged. Credentials and endpoints come from the same `AWS_*` environment as model
//! dirs.

use super::error::{InputError, Result};
use crate::model_dir::{ModelDir, ObjectInfo};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;

/// `location` itself when it is a local path; for a URL, the local path (or pattern) of
/// its cached copy.
pub(crate) fn localize(location: &str) -> Result<String> {
    if let Some(path) = location.strip_prefix("file://") {
        return Ok(path.to_string());
    }
    if !location.contains("://") {
        return Ok(location.to_string());
    }
    let fail = |detail: String| InputError::invalid(format!("{location}: {detail}"));
    let (dir_url, pattern) =
        location.rsplit_once('/').filter(|(_, p)| !p.is_empty()).ok_or_else(|| fail("names no file".into()))?;
    let dir = ModelDir::open(dir_url).map_err(|e| fail(e.to_string()))?;
    let matcher = glob::Pattern::new(pattern).map_err(|e| fail(e.to_string()))?;
    let wanted: Vec<_> = dir
        .list("")
        .map_err(|e| fail(e.to_string()))?
        .into_iter()
        .filter(|o| !o.name.contains('/') && matcher.matches(&o.name))
        .collect();
    if wanted.is_empty() {
        return Err(fail("no such object".into()));
    }
    let cache = cache_dir(dir_url, &wanted);
    std::fs::create_dir_all(&cache).map_err(|e| InputError::io(&cache, e))?;
    for object in wanted {
        let local = cache.join(&object.name);
        if local.is_file() {
            continue;
        }
        log::info!("Fetching {dir_url}/{} ({} bytes) into {}", object.name, object.size, cache.display());
        let bytes = dir.get(&object.name).map_err(|e| fail(e.to_string()))?;
        // Written aside and renamed: a reader never sees half a file, even if this is cut.
        let partial = cache.join(format!(".{}.partial-{}", object.name, std::process::id()));
        std::fs::write(&partial, &bytes).map_err(|e| InputError::io(&partial, e))?;
        std::fs::rename(&partial, &local).map_err(|e| InputError::io(&local, e))?;
    }
    Ok(cache.join(pattern).to_string_lossy().into_owned())
}

/// One folder per endpoint, remote directory and version of the objects in it.
fn cache_dir(dir_url: &str, objects: &[ObjectInfo]) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (dir_url, std::env::var("AWS_ENDPOINT_URL").unwrap_or_default()).hash(&mut h);
    for o in objects {
        (&o.name, o.size, o.last_modified).hash(&mut h);
    }
    std::env::temp_dir().join("engine-inputs").join(format!("{:016x}", h.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_fetched_once_and_patterns_keep_matching() -> Result<()> {
        let dir = ModelDir::open("memory://remote-inputs/data").map_err(|e| InputError::invalid(e.to_string()))?;
        for (name, text) in [("a.csv", "x,y\n1,2\n"), ("b.csv", "x,y\n3,4\n"), ("notes.txt", "no")] {
            dir.put(name, text.as_bytes().to_vec()).map_err(|e| InputError::invalid(e.to_string()))?;
        }
        let one = localize("memory://remote-inputs/data/a.csv")?;
        assert_eq!(std::fs::read_to_string(&one).map_err(|e| InputError::io(&one, e))?, "x,y\n1,2\n");
        let pattern = localize("memory://remote-inputs/data/*.csv")?;
        let matched: Vec<_> = glob::glob(&pattern).map_err(|e| InputError::invalid(e.to_string()))?.collect();
        assert_eq!(matched.len(), 2);
        assert_eq!(localize("/a/local/path.csv")?, "/a/local/path.csv");
        let missing = localize("memory://remote-inputs/data/nothing-*.csv").err().map(|e| e.to_string());
        assert!(missing.is_some_and(|m| m.contains("no such object")));
        Ok(())
    }
}
