//! Checkpoint naming, as TensorFlow names them: `model.ckpt-<global step>`, here with one data object
//! `model.ckpt-<step>.safetensors` instead of TensorFlow's `.index` + `.data-*` pair.

use super::error::{CheckpointError, Result};

pub const CHECKPOINT_BASENAME: &str = "model.ckpt";
pub const DATA_SUFFIX: &str = ".safetensors";
/// The state file TensorFlow's `tf.train.get_checkpoint_state` reads.
pub const STATE_FILE: &str = "checkpoint";
pub(crate) const LEASE_DIR: &str = "leases";
pub(crate) const PRESERVED_DIR: &str = "preserved";

/// `model.ckpt-<step>`: the name the state file records.
pub fn checkpoint_name(step: u64) -> String {
    format!("{CHECKPOINT_BASENAME}-{step}")
}

/// The object holding the tensors of checkpoint `name`.
pub fn data_object_name(name: &str) -> String {
    format!("{name}{DATA_SUFFIX}")
}

/// The step of `model.ckpt-<step>` or `model.ckpt-<step>.safetensors`, or `None` for any other name.
pub fn parse_step(name: &str) -> Option<u64> {
    let name = name.strip_suffix(DATA_SUFFIX).unwrap_or(name);
    let digits = name.strip_prefix(CHECKPOINT_BASENAME)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Reduces what a user or a state file may call a checkpoint (`model.ckpt-200`,
/// `model.ckpt-200.safetensors`, `/abs/dir/model.ckpt-200`, `s3://b/p/model.ckpt-200`) to its name,
/// and the directory part, if any.
pub fn split_checkpoint_path(path: &str) -> Result<(Option<&str>, String)> {
    let trimmed = path.trim_end_matches('/');
    let (dir, base) = match trimmed.rsplit_once('/') {
        Some(("", base)) => (Some("/"), base),
        Some((dir, base)) => (Some(dir), base),
        None => (None, trimmed),
    };
    let step = parse_step(base).ok_or_else(|| CheckpointError::InvalidName { path: path.to_string() })?;
    // Re-derived from the step so that `model.ckpt-007` and `model.ckpt-7` name the same object.
    Ok((dir, checkpoint_name(step)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(checkpoint_name(200), "model.ckpt-200");
        assert_eq!(data_object_name("model.ckpt-200"), "model.ckpt-200.safetensors");
        assert_eq!(parse_step("model.ckpt-200"), Some(200));
        assert_eq!(parse_step("model.ckpt-200.safetensors"), Some(200));
        assert_eq!(parse_step("model.ckpt-"), None);
        assert_eq!(parse_step("model.ckpt-2x"), None);
        assert_eq!(parse_step("model.ckpt-200.index"), None);
        assert_eq!(parse_step("other-200"), None);
    }

    #[test]
    fn paths_split_into_dir_and_name() {
        let split = |p: &str| split_checkpoint_path(p).ok().map(|(d, n)| (d.map(str::to_string), n));
        assert_eq!(split("model.ckpt-5"), Some((None, "model.ckpt-5".into())));
        assert_eq!(split("model.ckpt-5.safetensors"), Some((None, "model.ckpt-5".into())));
        assert_eq!(split("s3://b/p/model.ckpt-5"), Some((Some("s3://b/p".into()), "model.ckpt-5".into())));
        assert_eq!(split("/model.ckpt-5"), Some((Some("/".into()), "model.ckpt-5".into())));
        assert_eq!(split("model.ckpt-007"), Some((None, "model.ckpt-7".into())));
        assert!(split_checkpoint_path("runs/a").is_err());
    }
}
