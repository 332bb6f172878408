//! Parsing the string that addresses a model directory.
//!
//! TensorFlow accepts a bare path or a URL for `model_dir`; we accept the same shapes and decide the
//! backend from the scheme alone, so that a typo in the scheme is an error rather than a local directory
//! named `s4:`.

use super::error::{ModelDirError, Result};
use std::path::PathBuf;

/// Where a model directory lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A directory on the local filesystem (a bare path or `file://`).
    Local(PathBuf),
    /// `memory://name/prefix`: an in-memory store shared by every model dir of this process with the same
    /// `name`.
    Memory { name: String, prefix: String },
    /// `s3://bucket/prefix`.
    S3 { bucket: String, prefix: String },
}

impl Location {
    pub fn parse(location: &str) -> Result<Location> {
        let invalid = |reason: &str| ModelDirError::InvalidLocation {
            location: location.to_string(),
            reason: reason.to_string(),
        };
        if location.trim().is_empty() {
            return Err(invalid("the location is empty"));
        }
        let Some((scheme, rest)) = location.split_once("://") else {
            return Ok(Location::Local(PathBuf::from(location)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                // `file:///abs/path` gives `/abs/path`; `file://rel/path` is read as a relative path, which
                // is what people mean when they write it even though RFC 8089 disagrees.
                if rest.is_empty() {
                    return Err(invalid("file:// needs a path"));
                }
                Ok(Location::Local(PathBuf::from(rest)))
            }
            "memory" | "s3" | "s3a" => {
                let (host, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if host.is_empty() {
                    let what = if scheme == "memory" { "a store name" } else { "a bucket" };
                    return Err(invalid(&format!("{scheme}:// needs {what}: {scheme}://NAME/PREFIX")));
                }
                let prefix = prefix.trim_matches('/').to_string();
                if scheme == "memory" {
                    Ok(Location::Memory { name: host.to_string(), prefix })
                } else {
                    Ok(Location::S3 { bucket: host.to_string(), prefix })
                }
            }
            _ => Err(ModelDirError::UnsupportedScheme { location: location.to_string(), scheme: scheme.to_string() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(Location::parse("runs/a").ok(), Some(Location::Local("runs/a".into())));
        assert_eq!(Location::parse("file:///tmp/x").ok(), Some(Location::Local("/tmp/x".into())));
        assert_eq!(
            Location::parse("memory://m/a/b/").ok(),
            Some(Location::Memory { name: "m".into(), prefix: "a/b".into() })
        );
        assert_eq!(Location::parse("memory://m").ok(), Some(Location::Memory { name: "m".into(), prefix: "".into() }));
        assert_eq!(
            Location::parse("s3://bucket/p/q").ok(),
            Some(Location::S3 { bucket: "bucket".into(), prefix: "p/q".into() })
        );
    }

    #[test]
    fn rejects_unknown_schemes_and_empty_hosts() {
        let err = Location::parse("gs://b/p").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("unsupported scheme `gs://`"), "{err}");
        assert!(matches!(Location::parse("s3:///p"), Err(ModelDirError::InvalidLocation { .. })));
        assert!(matches!(Location::parse(""), Err(ModelDirError::InvalidLocation { .. })));
    }
}
