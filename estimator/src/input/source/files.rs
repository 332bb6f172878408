//! File lists from patterns, and whole-file reads that undo gzip.

use crate::input::error::{InputError, Result};
use flate2::read::MultiGzDecoder;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The files a pattern names, sorted (so that every pipeline sees the same order and file
/// sharding agrees everywhere). A pattern without wildcards names one file, which must exist.
pub(crate) fn expand(pattern: &str) -> Result<Vec<PathBuf>> {
    if !pattern.contains(['*', '?', '[']) {
        let path = PathBuf::from(pattern);
        if !path.is_file() {
            return Err(InputError::io(path, std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")));
        }
        return Ok(vec![path]);
    }
    let entries = glob::glob(pattern)
        .map_err(|e| InputError::BadPattern { pattern: pattern.to_string(), detail: e.to_string() })?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| {
            let path = e.path().to_path_buf();
            InputError::io(path, e.into())
        })?;
        if path.is_file() {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(InputError::NoFiles { pattern: pattern.to_string() });
    }
    paths.sort();
    Ok(paths)
}

/// The file's bytes, gunzipped when they start with gzip's magic number.
pub(crate) fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| InputError::io(path, e))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 2);
        MultiGzDecoder::new(raw.as_slice()).read_to_end(&mut out).map_err(|e| InputError::io(path, e))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_sorted_and_missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.txt", "a.txt", "c.csv"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        let pattern = format!("{}/*.txt", dir.path().display());
        let files = expand(&pattern).unwrap();
        let names: Vec<_> = files.iter().map(|p| p.file_name().unwrap().to_str().unwrap()).collect();
        assert_eq!(names, ["a.txt", "b.txt"]);
        let err = expand(&format!("{}/*.none", dir.path().display())).unwrap_err();
        assert!(matches!(err, InputError::NoFiles { .. }), "{err}");
        let err = expand(&format!("{}/missing.csv", dir.path().display())).unwrap_err().to_string();
        assert!(err.contains("missing.csv"), "{err}");
    }

    #[test]
    fn gzip_is_undone() {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gz");
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(b"hello").unwrap();
        std::fs::write(&path, enc.finish().unwrap()).unwrap();
        assert_eq!(read_maybe_gz(&path).unwrap(), b"hello");
    }
}
