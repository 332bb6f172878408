//! The `checkpoint` state file in TensorFlow's protobuf text format (`CheckpointState`):
//!
//! ```text
//! model_checkpoint_path: "model.ckpt-200"
//! all_model_checkpoint_paths: "model.ckpt-100"
//! all_model_checkpoint_paths: "model.ckpt-200"
//! all_model_checkpoint_timestamps: 1700000000.5
//! all_model_checkpoint_timestamps: 1700000100.25
//! last_preserved_timestamp: 1699999990
//! ```
//!
//! Publishing a checkpoint is rewriting this file, so it is the commit point of a save: TensorFlow's
//! tools and ours agree on what "the latest checkpoint" is by reading it. Paths are relative to the model
//! dir, as TensorFlow writes them.

use super::error::{CheckpointError, Result};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckpointState {
    /// The latest checkpoint.
    pub model_checkpoint_path: String,
    /// Every kept checkpoint, oldest first; the latest is last.
    pub all_model_checkpoint_paths: Vec<String>,
    /// Seconds since the epoch at which each of `all_model_checkpoint_paths` was saved (same length, or
    /// empty in files written by old TensorFlow versions).
    pub all_model_checkpoint_timestamps: Vec<f64>,
    /// When a checkpoint was last kept for good under `keep_checkpoint_every_n_hours`.
    pub last_preserved_timestamp: Option<f64>,
}

impl CheckpointState {
    /// The save time of `path`, when recorded.
    pub fn timestamp_of(&self, path: &str) -> Option<f64> {
        if self.all_model_checkpoint_timestamps.len() != self.all_model_checkpoint_paths.len() {
            return None;
        }
        let index = self.all_model_checkpoint_paths.iter().position(|p| p == path)?;
        self.all_model_checkpoint_timestamps.get(index).copied()
    }

    /// Keeps the listed checkpoints `keep` accepts (their timestamps with them); the latest
    /// becomes the newest kept one.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let timed = self.all_model_checkpoint_timestamps.len() == self.all_model_checkpoint_paths.len();
        let mut timestamps = std::mem::take(&mut self.all_model_checkpoint_timestamps).into_iter();
        let mut kept_timestamps = Vec::new();
        self.all_model_checkpoint_paths.retain(|path| {
            let timestamp = if timed { timestamps.next() } else { None };
            let kept = keep(path);
            if kept {
                kept_timestamps.extend(timestamp);
            }
            kept
        });
        self.all_model_checkpoint_timestamps = kept_timestamps;
        self.model_checkpoint_path = self.all_model_checkpoint_paths.last().cloned().unwrap_or_default();
    }

    pub fn to_text(&self) -> String {
        let mut text = format!("model_checkpoint_path: \"{}\"\n", escape(&self.model_checkpoint_path));
        for path in &self.all_model_checkpoint_paths {
            text.push_str(&format!("all_model_checkpoint_paths: \"{}\"\n", escape(path)));
        }
        for timestamp in &self.all_model_checkpoint_timestamps {
            text.push_str(&format!("all_model_checkpoint_timestamps: {}\n", format_double(*timestamp)));
        }
        if let Some(timestamp) = self.last_preserved_timestamp {
            text.push_str(&format!("last_preserved_timestamp: {}\n", format_double(timestamp)));
        }
        text
    }

    /// Parses the text read from `url` (named in errors, with the line).
    pub fn parse(text: &str, url: &str) -> Result<CheckpointState> {
        let error = |line: usize, reason: String| CheckpointError::StateFile { url: url.to_string(), line, reason };
        let mut state = CheckpointState::default();
        let mut latest: Option<String> = None;
        for (index, raw) in text.lines().enumerate() {
            let line_number = index + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line
                .split_once(':')
                .ok_or_else(|| error(line_number, format!("expected `field: value`, found `{line}`")))?;
            let value = value.trim();
            let at = |reason: String| error(line_number, reason);
            match key.trim() {
                "model_checkpoint_path" => latest = Some(unquote(value).map_err(at)?),
                "all_model_checkpoint_paths" => state.all_model_checkpoint_paths.push(unquote(value).map_err(at)?),
                "all_model_checkpoint_timestamps" => {
                    state.all_model_checkpoint_timestamps.push(parse_double(value).map_err(at)?)
                }
                "last_preserved_timestamp" => state.last_preserved_timestamp = Some(parse_double(value).map_err(at)?),
                other => return Err(at(format!("unknown field `{other}`"))),
            }
        }
        let Some(latest) = latest else {
            return Err(error(0, "no `model_checkpoint_path`".into()));
        };
        if latest.is_empty() {
            return Err(error(0, "`model_checkpoint_path` is empty".into()));
        }
        let timestamps = state.all_model_checkpoint_timestamps.len();
        if timestamps != 0 && timestamps != state.all_model_checkpoint_paths.len() {
            return Err(error(
                0,
                format!("{timestamps} timestamps for {} checkpoint paths", state.all_model_checkpoint_paths.len()),
            ));
        }
        // TensorFlow's `update_checkpoint_state` guarantees the latest is the last of the list; files
        // edited by hand may lack it, and TensorFlow then appends it, as we do.
        if state.all_model_checkpoint_paths.last() != Some(&latest) {
            state.all_model_checkpoint_paths.retain(|p| p != &latest);
            state.all_model_checkpoint_paths.push(latest.clone());
            state.all_model_checkpoint_timestamps.clear();
        }
        state.model_checkpoint_path = latest;
        Ok(state)
    }
}

/// Rust's shortest round-trip formatting; integral values print without a fraction, which the text
/// format accepts for doubles.
fn format_double(value: f64) -> String {
    format!("{value}")
}

fn parse_double(value: &str) -> std::result::Result<f64, String> {
    value.parse::<f64>().map_err(|e| format!("`{value}` is not a number: {e}"))
}

/// C-style escaping, as protobuf's text format writes strings.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'"' => out.push_str("\\\""),
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(byte as char),
            other => out.push_str(&format!("\\{other:03o}")),
        }
    }
    out
}

/// Reads a quoted text-format string (either quote), undoing C escapes including octal and hex.
fn unquote(value: &str) -> std::result::Result<String, String> {
    let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'');
    let Some(quote) = quote else {
        return Err(format!("expected a quoted string, found `{value}`"));
    };
    let inner = value
        .strip_prefix(quote)
        .and_then(|rest| rest.strip_suffix(quote))
        .ok_or_else(|| format!("unterminated string `{value}`"))?;
    let bytes = inner.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let escaped = *bytes.get(i + 1).ok_or_else(|| format!("string ends in a backslash: `{value}`"))?;
        i += 2;
        match escaped {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'"' | b'\'' | b'\\' | b'?' => out.push(escaped),
            b'0'..=b'7' => {
                let start = i - 1;
                let end = (start + 3).min(bytes.len());
                let digits: String =
                    bytes[start..end].iter().take_while(|b| (b'0'..=b'7').contains(b)).map(|&b| b as char).collect();
                let code = u8::from_str_radix(&digits, 8).map_err(|_| format!("bad octal escape in `{value}`"))?;
                out.push(code);
                i = start + digits.len();
            }
            b'x' => {
                let digits: String =
                    bytes[i..].iter().take(2).take_while(|b| b.is_ascii_hexdigit()).map(|&b| b as char).collect();
                let code = u8::from_str_radix(&digits, 16).map_err(|_| format!("bad hex escape in `{value}`"))?;
                out.push(code);
                i += digits.len();
            }
            other => return Err(format!("unknown escape `\\{}` in `{value}`", other as char)),
        }
    }
    String::from_utf8(out).map_err(|_| format!("string is not UTF-8: `{value}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_tensorflow_layout() {
        let state = CheckpointState {
            model_checkpoint_path: "model.ckpt-200".into(),
            all_model_checkpoint_paths: vec!["model.ckpt-100".into(), "model.ckpt-200".into()],
            all_model_checkpoint_timestamps: vec![1700000000.5, 1700000100.25],
            last_preserved_timestamp: Some(1699999990.0),
        };
        let expected = "model_checkpoint_path: \"model.ckpt-200\"\n\
                        all_model_checkpoint_paths: \"model.ckpt-100\"\n\
                        all_model_checkpoint_paths: \"model.ckpt-200\"\n\
                        all_model_checkpoint_timestamps: 1700000000.5\n\
                        all_model_checkpoint_timestamps: 1700000100.25\n\
                        last_preserved_timestamp: 1699999990\n";
        assert_eq!(state.to_text(), expected);
        assert_eq!(CheckpointState::parse(expected, "ckpt").ok(), Some(state));
    }

    #[test]
    fn reads_what_tensorflow_writes() -> anyhow::Result<()> {
        // As written by TF 2.x's CheckpointManager (timestamps with full precision, single quotes unused).
        let text = "model_checkpoint_path: \"ckpt-3\"\nall_model_checkpoint_paths: \"ckpt-2\"\n\
                    all_model_checkpoint_paths: \"ckpt-3\"\nall_model_checkpoint_timestamps: 1651234567.1234567\n\
                    all_model_checkpoint_timestamps: 1651234569.7654321\nlast_preserved_timestamp: 1651234560.0\n";
        let state = CheckpointState::parse(text, "checkpoint")?;
        assert_eq!(state.all_model_checkpoint_paths, vec!["ckpt-2", "ckpt-3"]);
        assert_eq!(state.timestamp_of("ckpt-3"), Some(1651234569.7654321));
        Ok(())
    }

    #[test]
    fn latest_missing_from_the_list_is_appended() -> anyhow::Result<()> {
        let state = CheckpointState::parse("model_checkpoint_path: 'model.ckpt-5'\n", "checkpoint")?;
        assert_eq!(state.all_model_checkpoint_paths, vec!["model.ckpt-5"]);
        Ok(())
    }

    #[test]
    fn escapes_round_trip() {
        for tricky in ["a\"b", "c:\\dir\\x", "tab\there", "é"] {
            assert_eq!(unquote(&format!("\"{}\"", escape(tricky))).ok().as_deref(), Some(tricky));
        }
        assert_eq!(unquote(r#""\101\x42""#).ok().as_deref(), Some("AB"));
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let cases = [
            ("model_checkpoint_path: \"a\"\nbogus: 1\n", "line 2", "unknown field `bogus`"),
            ("model_checkpoint_path: \"a\nx", "line 1", "unterminated"),
            ("all_model_checkpoint_paths: \"a\"\n", "line 0", "no `model_checkpoint_path`"),
            ("model_checkpoint_path: \"a\"\nall_model_checkpoint_timestamps: soon\n", "line 2", "not a number"),
            ("model_checkpoint_path: \"a\"\njunk\n", "line 2", "expected `field: value`"),
        ];
        for (text, line, reason) in cases {
            let message =
                CheckpointState::parse(text, "s3://b/p/checkpoint").err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                message.contains("s3://b/p/checkpoint") && message.contains(line) && message.contains(reason),
                "{message}"
            );
        }
    }
}
