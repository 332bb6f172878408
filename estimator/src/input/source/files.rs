//! File lists from patterns, and bounded reads of IDX files that undo gzip.

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
            return Err(InputError::io(
                path.clone(),
                std::io::Error::new(std::io::ErrorKind::NotFound, missing(&path)),
            ));
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

/// Why `path` cannot be read as a file: not there (with where a relative path was looked
/// for, since that is the working directory, not the spec's folder), or not a regular file.
fn missing(path: &Path) -> String {
    if path.exists() {
        return "not a regular file".into();
    }
    match std::env::current_dir() {
        Ok(dir) if path.is_relative() => {
            format!("no such file (a relative path is read from the working directory, {})", dir.display())
        }
        _ => "no such file".into(),
    }
}

/// An IDX file's bytes (gunzipped), read no further than its header declares: a path to
/// `/dev/zero`, a gzip member that inflates past its header's dimensions (a "bomb"), or a
/// header claiming more than `max_bytes` is refused before the data is allocated, naming
/// the file and what its header says. A short file is returned as it is, for the parser
/// to report as truncated.
pub(crate) fn read_idx(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    let bad = |detail: String| InputError::BadIdx { path: path.to_path_buf(), detail };
    let meta = std::fs::metadata(path).map_err(|e| InputError::io(path, e))?;
    if !meta.is_file() {
        return Err(bad("is not a regular file (a device, a pipe or a directory); an IDX input must be a file".into()));
    }
    let mut file = std::fs::File::open(path).map_err(|e| InputError::io(path, e))?;
    let mut start = [0u8; 2];
    let peeked = read_up_to(&mut file, &mut start).map_err(|e| InputError::io(path, e))?;
    let head = std::io::Cursor::new(start[..peeked].to_vec());
    let gzipped = start[..peeked] == [0x1f, 0x8b];
    let mut reader: Box<dyn Read> = if gzipped {
        Box::new(MultiGzDecoder::new(std::io::BufReader::new(head.chain(file))))
    } else {
        Box::new(head.chain(file))
    };
    let io = |e: std::io::Error| InputError::io(path, e);
    let mut magic = [0u8; 4];
    let got = read_up_to(&mut reader, &mut magic).map_err(io)?;
    let mut bytes = magic[..got].to_vec();
    if got < 4 {
        return Ok(bytes);
    }
    // An unknown type is the parser's to name.
    let Some(elem_size) = super::idx::element_size(magic[2]) else { return Ok(bytes) };
    let elem_size = elem_size as u64;
    let mut dims_bytes = vec![0u8; 4 * magic[3] as usize];
    let got = read_up_to(&mut reader, &mut dims_bytes).map_err(io)?;
    bytes.extend_from_slice(&dims_bytes[..got]);
    if got < dims_bytes.len() {
        return Ok(bytes);
    }
    let dims: Vec<u64> =
        dims_bytes.chunks_exact(4).map(|c| u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]))).collect();
    let data = dims.iter().try_fold(elem_size, |acc, &d| acc.checked_mul(d)).unwrap_or(u64::MAX);
    if data > max_bytes {
        return Err(bad(format!(
            "its header declares dimensions {dims:?}: {} of data, more than the {} this machine allows an input file \
             (half its memory); the header is corrupt, or the file is not an IDX file",
            super::super::limits::bytes(data),
            super::super::limits::bytes(max_bytes)
        )));
    }
    if !gzipped && meta.len() > bytes.len() as u64 + data {
        return Err(bad(format!(
            "it is {} bytes, more than its header's dimensions {dims:?} declare ({} bytes of data after the header)",
            meta.len(),
            data
        )));
    }
    bytes.reserve(data as usize);
    // One byte past the declared data tells a member that inflates further from an exact one.
    let limit = data + 1;
    reader.by_ref().take(limit).read_to_end(&mut bytes).map_err(io)?;
    let header = 4 + dims_bytes.len() as u64;
    if bytes.len() as u64 > header + data {
        return Err(bad(format!(
            "it inflates past the {data} bytes of data its header's dimensions {dims:?} declare (a corrupt \
             or mismatched gzip member); reading stopped there"
        )));
    }
    Ok(bytes)
}

/// Fills as much of `buf` as the reader has, stopping early only at its end.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
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

    fn gzipped(bytes: &[u8]) -> Vec<u8> {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let mut enc = GzEncoder::new(Vec::new(), Compression::best());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    /// A header for `[n, 2, 2]` u8 images.
    fn idx_header(n: u32) -> Vec<u8> {
        let mut h = vec![0, 0, 0x08, 3];
        for d in [n, 2, 2] {
            h.extend_from_slice(&d.to_be_bytes());
        }
        h
    }

    #[test]
    fn idx_reads_stop_where_the_header_says() {
        let dir = tempfile::tempdir().unwrap();
        // Exact, raw and gzipped.
        let mut exact = idx_header(3);
        exact.extend_from_slice(&[7; 12]);
        let raw = dir.path().join("exact.idx");
        std::fs::write(&raw, &exact).unwrap();
        assert_eq!(read_idx(&raw, 1 << 20).unwrap(), exact);
        let gz = dir.path().join("exact.idx.gz");
        std::fs::write(&gz, gzipped(&exact)).unwrap();
        assert_eq!(read_idx(&gz, 1 << 20).unwrap(), exact);
        // A gzip bomb: 64 MiB of zeros after a header that declares 12 bytes; 64 KiB on disk.
        let mut bomb = idx_header(3);
        bomb.extend(std::iter::repeat_n(0u8, 64 << 20));
        let path = dir.path().join("bomb.idx.gz");
        std::fs::write(&path, gzipped(&bomb)).unwrap();
        drop(bomb);
        let err = read_idx(&path, 1 << 40).unwrap_err().to_string();
        assert!(err.contains("bomb.idx.gz") && err.contains("inflates past the 12 bytes"), "{err}");
        // A raw file longer than its header says.
        let mut long = exact.clone();
        long.push(1);
        std::fs::write(&raw, &long).unwrap();
        let err = read_idx(&raw, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("more than its header's dimensions"), "{err}");
        // A header that declares more than the machine allows, refused before allocating.
        let huge = idx_header(u32::MAX);
        std::fs::write(&raw, &huge).unwrap();
        let err = read_idx(&raw, 1 << 30).unwrap_err().to_string();
        assert!(err.contains("[4294967295, 2, 2]") && err.contains("more than the 1.0 GiB"), "{err}");
        // A short file comes back as it is, for the parser to name as truncated.
        std::fs::write(&raw, &exact[..20]).unwrap();
        assert_eq!(read_idx(&raw, 1 << 20).unwrap(), &exact[..20]);
    }

    #[test]
    fn devices_are_not_read_as_idx_files() {
        let err = read_idx(Path::new("/dev/zero"), 1 << 20).unwrap_err().to_string();
        assert!(err.contains("/dev/zero") && err.contains("not a regular file"), "{err}");
    }
}
