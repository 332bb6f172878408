//! The deserializer's error: a [`SpecError`] being built up as it travels outwards.
//!
//! serde creates errors without context (`missing_field("units")`); each level of our
//! deserializer that an error passes through fills in what it knows and the innermost
//! level wins, so the error ends up pointing at the exact value, key or identifier.

use crate::spec::{ErrorKind, FieldPath, Location, SpecError, syntax::Node};
use serde::de::{self, Expected, Unexpected};
use std::fmt;

/// Boxed, as [`SpecError`] is: it travels through every level of every deserialization.
#[derive(Debug)]
pub struct DeError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    located: Option<(FieldPath, Location)>,
}

impl DeError {
    pub fn new(kind: ErrorKind) -> Self {
        DeError(Box::new(Inner { kind, located: None }))
    }

    pub fn wrong_type(expected: impl Into<String>, found: String) -> Self {
        DeError::new(ErrorKind::WrongType { expected: expected.into(), found })
    }

    /// Attaches a place unless an inner level already did. A missing field is reported at
    /// the struct that lacks it, under the path of the field itself.
    pub fn at(mut self, path: &FieldPath, loc: &Location) -> Self {
        if self.0.located.is_none() {
            let path = match &self.0.kind {
                ErrorKind::MissingField { field } | ErrorKind::DuplicateField { field } => path.field(field),
                _ => path.clone(),
            };
            self.0.located = Some((path, loc.clone()));
        }
        self
    }

    /// As [`DeError::at`], at a value: a wrong-type error that only says "enum" or "map"
    /// (all serde's visitors know) then describes the value as written.
    pub fn at_node(mut self, path: &FieldPath, node: &Node) -> Self {
        const VAGUE: &[&str] = &[
            "enum",
            "map",
            "sequence",
            "unit value",
            "Option value",
            "unit variant",
            "newtype variant",
            "tuple variant",
            "struct variant",
            "newtype struct",
        ];
        if self.0.located.is_none()
            && let ErrorKind::WrongType { found, .. } = &mut self.0.kind
            && VAGUE.contains(&found.as_str())
        {
            *found = node.value.describe();
        }
        self.at(path, &node.loc)
    }

    /// Names what kind of thing an unknown name was meant to be (`layer`, `loss`).
    pub fn naming(mut self, what: &str) -> Self {
        if let ErrorKind::UnknownName { what: w, .. } = &mut self.0.kind
            && w.is_empty()
        {
            *w = what.to_string();
        }
        self
    }

    /// Rewrites the "expected" part of a wrong-type error if `better` has something to say.
    pub fn expecting_instead(mut self, better: impl FnOnce(&str) -> Option<String>) -> Self {
        if let ErrorKind::WrongType { expected, .. } = &mut self.0.kind
            && let Some(b) = better(expected)
        {
            *expected = b;
        }
        self
    }

    pub fn into_spec_error(self) -> SpecError {
        let Inner { kind, located } = *self.0;
        match located {
            Some((path, loc)) => SpecError::new(Some(loc), path, kind),
            None => SpecError::new(None, FieldPath::root(), kind),
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.kind)
    }
}

impl std::error::Error for DeError {}

/// serde's primitive visitors describe themselves by Rust type name; a spec author
/// thinks in kinds of values.
fn plain(expected: &dyn Expected) -> String {
    let text = expected.to_string();
    match text.as_str() {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative integer".to_string(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer".to_string(),
        "f32" | "f64" => "a number".to_string(),
        _ => text,
    }
}

fn found(unexpected: Unexpected<'_>) -> String {
    match unexpected {
        Unexpected::Float(x) => format!("number `{x}`"),
        Unexpected::Signed(i) => format!("integer `{i}`"),
        Unexpected::Unsigned(u) => format!("integer `{u}`"),
        other => other.to_string(),
    }
}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError::new(ErrorKind::Invalid(msg.to_string()))
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        DeError::wrong_type(plain(expected), found(unexpected))
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        DeError::wrong_type(plain(expected), found(unexpected))
    }

    fn invalid_length(len: usize, expected: &dyn Expected) -> Self {
        DeError::new(ErrorKind::WrongType { expected: plain(expected), found: format!("{len} element(s)") })
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        DeError::new(ErrorKind::UnknownName {
            what: String::new(),
            name: variant.to_string(),
            expected: crate::spec::names::current(expected),
        })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        DeError::new(ErrorKind::UnknownField {
            field: field.to_string(),
            expected: expected.iter().map(|s| s.to_string()).collect(),
        })
    }

    fn missing_field(field: &'static str) -> Self {
        DeError::new(ErrorKind::MissingField { field: field.to_string() })
    }

    fn duplicate_field(field: &'static str) -> Self {
        DeError::new(ErrorKind::DuplicateField { field: field.to_string() })
    }
}
