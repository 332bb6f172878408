//! Spec errors. Every error says where (`file:line:col`), which field (`model.layers[3].units`)
//! and what was expected, so that a user can fix a spec without reading the engine's source.

use super::FieldPath;
use std::{fmt, sync::Arc};
use thiserror::Error;

/// Where a piece of spec text came from: a file, or an override on the command line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    File(Arc<str>),
    /// The override as typed: `--set run_config.save_checkpoints_steps=200`, `--max-steps 10`.
    CommandLine(Arc<str>),
}

/// A position in spec text; lines and columns count from 1, columns in characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    pub origin: Origin,
    pub line: usize,
    pub col: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Origin::File(file) => write!(f, "{file}:{}:{}", self.line, self.col),
            Origin::CommandLine(arg) => write!(f, "`{arg}` (column {})", self.col),
        }
    }
}

/// What went wrong, grouped by kind so tests and callers can match on it.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ErrorKind {
    #[error("cannot read the spec: {0}")]
    Io(String),

    #[error("syntax error: {0}")]
    Syntax(String),

    #[error("unknown field `{field}`{}, expected one of: {}", super::names::did_you_mean(field, expected), expected.join(", "))]
    UnknownField { field: String, expected: Vec<String> },

    #[error("missing field `{field}`")]
    MissingField { field: String },

    #[error("field `{field}` is given twice")]
    DuplicateField { field: String },

    #[error("expected {expected}, found {found}")]
    WrongType { expected: String, found: String },

    /// An unknown layer, activation, loss, optimizer, metric, strategy... name.
    #[error(
        "unknown {} `{name}`{}, expected one of: {}",
        if what.is_empty() { "name" } else { what },
        super::names::did_you_mean(name, expected),
        expected.join(", ")
    )]
    UnknownName { what: String, name: String, expected: Vec<String> },

    #[error("shape mismatch: {0}")]
    Shape(String),

    /// A value of the right type that is not allowed (a negative rate, an empty list).
    #[error("{0}")]
    Invalid(String),

    #[error("bad override: {0}")]
    Override(String),
}

/// A located spec error: `file:line:col: path: message`. Boxed: errors are rare and
/// `Result<_, SpecError>` is returned everywhere.
#[derive(Clone, PartialEq)]
pub struct SpecError(Box<Details>);

/// `Debug` is the located message, as `Display`: what `fn main() -> Result<..>` prints.
impl std::fmt::Debug for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        engine_graph::fmt_error_chain(self, f)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Details {
    location: Option<Location>,
    path: FieldPath,
    kind: ErrorKind,
}

impl SpecError {
    pub fn new(location: Option<Location>, path: FieldPath, kind: ErrorKind) -> Self {
        SpecError(Box::new(Details { location, path, kind }))
    }

    /// An error about a whole file (it cannot be read).
    pub fn io(file: &str, reason: impl fmt::Display) -> Self {
        SpecError::new(None, FieldPath::root(), ErrorKind::Io(format!("{file}: {reason}")))
    }

    /// Where the offending text is, when it is in a file or on the command line.
    pub fn location(&self) -> Option<&Location> {
        self.0.location.as_ref()
    }

    /// The field path of the offending value (empty for the whole spec).
    pub fn path(&self) -> &FieldPath {
        &self.0.path
    }

    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = self.location() {
            write!(f, "{loc}: ")?;
        }
        if !self.path().is_root() {
            write!(f, "{}: ", self.path())?;
        }
        write!(f, "{}", self.kind())
    }
}

impl std::error::Error for SpecError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_location_path_and_choices() {
        let e = SpecError::new(
            Some(Location { origin: Origin::File("job.ron".into()), line: 7, col: 13 }),
            FieldPath::root().field("loss"),
            ErrorKind::UnknownName {
                what: "loss".into(),
                name: "Hinge".into(),
                expected: vec!["MeanSquaredError".into(), "SigmoidCrossEntropy".into()],
            },
        );
        assert_eq!(
            e.to_string(),
            "job.ron:7:13: loss: unknown loss `Hinge`, expected one of: MeanSquaredError, SigmoidCrossEntropy"
        );
    }
}
