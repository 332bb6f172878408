//! Field paths (`model.layers[3].units`): how errors name a place in a spec and how
//! `--set` overrides address one.

use std::fmt;

/// One step from a value to a part of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A struct field, written `.name`.
    Field(String),
    /// A list element, written `[i]`.
    Index(usize),
    /// A tuple element, written `.i`.
    Elem(usize),
    /// A map entry, written `["key"]`.
    Key(String),
}

/// A path from the root of a job spec. Empty for the root itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FieldPath(Vec<Segment>);

impl FieldPath {
    pub fn root() -> Self {
        FieldPath(Vec::new())
    }

    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// A new path one step below this one.
    pub fn join(&self, segment: Segment) -> Self {
        let mut v = self.0.clone();
        v.push(segment);
        FieldPath(v)
    }

    pub fn field(&self, name: &str) -> Self {
        self.join(Segment::Field(name.to_string()))
    }

    pub fn index(&self, i: usize) -> Self {
        self.join(Segment::Index(i))
    }

    pub fn elem(&self, i: usize) -> Self {
        self.join(Segment::Elem(i))
    }

    pub fn key(&self, key: &str) -> Self {
        self.join(Segment::Key(key.to_string()))
    }

    /// Parses the syntax that `Display` writes: `run_config.save_checkpoints_steps`,
    /// `model.layers[3].units`, `model.nodes[2].1`, `model.inputs["image"]`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let chars: Vec<char> = text.chars().collect();
        let mut segments = Vec::new();
        let mut i = 0;
        let bad = |at: usize, why: &str| format!("bad path `{text}` at character {}: {why}", at + 1);
        while i < chars.len() {
            if chars[i] == '[' {
                let close = chars[i..].iter().position(|&c| c == ']').map(|p| p + i).ok_or_else(|| bad(i, "no `]`"))?;
                let inner: String = chars[i + 1..close].iter().collect();
                let inner = inner.trim();
                if let Some(key) = inner.strip_prefix('"').and_then(|k| k.strip_suffix('"')) {
                    segments.push(Segment::Key(key.to_string()));
                } else {
                    let n = inner.parse().map_err(|_| bad(i, "expected an index or a quoted key in `[]`"))?;
                    segments.push(Segment::Index(n));
                }
                i = close + 1;
                continue;
            }
            if !segments.is_empty() {
                if chars[i] != '.' {
                    return Err(bad(i, "expected `.` or `[`"));
                }
                i += 1;
            }
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            if start == i {
                return Err(bad(start, "expected a field name"));
            }
            let word: String = chars[start..i].iter().collect();
            segments.push(match word.parse::<usize>() {
                Ok(n) => Segment::Elem(n),
                Err(_) => Segment::Field(word),
            });
        }
        if segments.is_empty() {
            return Err(format!("bad path `{text}`: it is empty"));
        }
        Ok(FieldPath(segments))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Segment::Field(name) if i == 0 => f.write_str(name)?,
                Segment::Field(name) => write!(f, ".{name}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
                Segment::Elem(n) => write!(f, ".{n}")?,
                Segment::Key(k) => write!(f, "[{k:?}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_print_and_parse_back() -> Result<(), String> {
        for text in ["model.layers[3].units", "model.nodes[2].1.filters", "model.inputs[\"image\"]", "loss"] {
            assert_eq!(FieldPath::parse(text)?.to_string(), text);
        }
        let p = FieldPath::root().field("model").index(3).field("units");
        assert_eq!(p.to_string(), "model[3].units");
        Ok(())
    }

    #[test]
    fn malformed_paths_are_refused() {
        assert!(FieldPath::parse("").is_err());
        assert!(FieldPath::parse("a..b").is_err());
        assert!(FieldPath::parse("a[x]").is_err());
        assert!(FieldPath::parse("a[1").is_err());
        assert!(FieldPath::parse("a b").is_err());
    }
}
