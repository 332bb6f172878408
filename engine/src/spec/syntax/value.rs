//! The parsed form of RON text: a tree of values, each with the place it was written.
//!
//! The typed spec is deserialized from this tree rather than from the text directly, so
//! that `--set` overrides can be applied to the tree first (the same deserializer then
//! checks them), and so that errors found long after parsing (a shape mismatch during
//! lowering) can still be located by their field path.

use crate::spec::{FieldPath, Location, path::Segment};

/// A value and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub loc: Location,
    pub value: Value,
}

/// `name: value` inside parentheses, with the position of the name.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub name_loc: Location,
    pub value: Node,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Char(char),
    /// `[a, b]`
    List(Vec<Node>),
    /// `{k: v}`
    Map(Vec<(Node, Node)>),
    /// A bare identifier: a unit variant (`Flatten`, `Relu`, `None`) or unit struct.
    Ident(String),
    /// `(a, b)`, `Name(a, b)`, and `()`.
    Tuple {
        name: Option<String>,
        items: Vec<Node>,
    },
    /// `(a: 1)`, `Name(a: 1)`.
    Struct {
        name: Option<String>,
        fields: Vec<Field>,
    },
}

impl Value {
    /// A short description for "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match self {
            Value::Bool(b) => format!("boolean `{b}`"),
            Value::Int(i) => format!("integer `{i}`"),
            Value::Float(x) => format!("number `{x}`"),
            Value::Str(s) => format!("string {s:?}"),
            Value::Char(c) => format!("character {c:?}"),
            Value::List(_) => "a list `[...]`".to_string(),
            Value::Map(_) => "a map `{...}`".to_string(),
            Value::Ident(name) => format!("`{name}`"),
            Value::Tuple { name: Some(n), .. } | Value::Struct { name: Some(n), .. } => format!("`{n}(...)`"),
            Value::Tuple { name: None, items } if items.is_empty() => "`()`".to_string(),
            Value::Tuple { name: None, .. } => "a tuple `(...)`".to_string(),
            Value::Struct { name: None, .. } => "a struct `(field: ...)`".to_string(),
        }
    }

    /// The variant or struct name written before the parentheses, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            Value::Ident(n) => Some(n),
            Value::Tuple { name, .. } | Value::Struct { name, .. } => name.as_deref(),
            _ => None,
        }
    }

    pub fn fields(&self) -> Option<&[Field]> {
        match self {
            Value::Struct { fields, .. } => Some(fields),
            _ => None,
        }
    }
}

impl Node {
    pub fn new(loc: Location, value: Value) -> Self {
        Node { loc, value }
    }

    /// The struct field `name`, if this is a struct that has it.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.value.fields()?.iter().find(|f| f.name == name)
    }

    /// The child one segment down. Map entries may be addressed as fields too
    /// (`model.inputs.image`), which is how a user writes them in `--set`.
    pub fn child(&self, segment: &Segment) -> Option<&Node> {
        match (segment, &self.value) {
            (Segment::Field(name), Value::Struct { .. }) => self.field(name).map(|f| &f.value),
            (Segment::Field(key) | Segment::Key(key), Value::Map(entries)) => {
                entries.iter().find(|(k, _)| matches!(&k.value, Value::Str(s) if s == key)).map(|(_, v)| v)
            }
            (Segment::Index(i) | Segment::Elem(i), Value::List(items) | Value::Tuple { items, .. }) => items.get(*i),
            _ => None,
        }
    }

    /// The child one segment down, looking through `Some(x)` (the deserializer gives
    /// `Some` no path segment either).
    fn step(&self, segment: &Segment) -> Option<&Node> {
        match &self.value {
            Value::Tuple { name: Some(n), items } if n == "Some" && items.len() == 1 => items[0].child(segment),
            _ => self.child(segment),
        }
    }

    /// The node exactly at `path`, if it is written.
    pub fn get(&self, path: &FieldPath) -> Option<&Node> {
        path.segments().iter().try_fold(self, |node, segment| node.step(segment))
    }

    /// The node at `path`, or the deepest ancestor that exists (a field left to its
    /// default is reported at the struct that omits it).
    pub fn locate(&self, path: &FieldPath) -> &Node {
        let mut node = self;
        for segment in path.segments() {
            match node.step(segment) {
                Some(next) => node = next,
                None => break,
            }
        }
        node
    }
}
