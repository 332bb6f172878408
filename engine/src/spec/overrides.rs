//! `--set path=value` overrides, applied to the value tree before it is deserialized, so
//! an overridden value is checked (and located) exactly like one written in the file.

use super::{
    ErrorKind, FieldPath, Location, Origin, SpecError,
    path::Segment,
    syntax::{Field, Node, Value, parse_value},
};

/// One override: where, and the new value.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub path: FieldPath,
    pub value: Node,
    /// Where the path was written (errors about the path point here).
    path_loc: Location,
}

impl Override {
    /// Parses the argument of `--set`: `run_config.save_checkpoints_steps=200`. The value is
    /// RON (`optimizer=Adam(learning_rate: 0.001)`); text that is not RON and has no
    /// brackets or quotes is taken as a string (`run_config.model_dir=runs/a`).
    pub fn parse(arg: &str) -> Result<Self, SpecError> {
        const FLAG: &str = "--set ";
        let origin = Origin::CommandLine(format!("{FLAG}{arg}").into());
        let first_col = FLAG.chars().count() + 1;
        let path_loc = Location { origin: origin.clone(), line: 1, col: first_col };
        let bad =
            |message: String| SpecError::new(Some(path_loc.clone()), FieldPath::root(), ErrorKind::Override(message));
        let Some((path_text, value_text)) = arg.split_once('=') else {
            return Err(bad(format!("`{arg}` is not of the form path=value")));
        };
        let path = FieldPath::parse(path_text.trim()).map_err(bad)?;
        let value_col = first_col + path_text.chars().count() + 1;
        let value = match parse_value(value_text, &origin, value_col) {
            Ok(node) => node,
            Err(_)
                if !value_text.contains(['(', ')', '[', ']', '{', '}', '"', '\'']) && !value_text.trim().is_empty() =>
            {
                let loc = Location { origin: origin.clone(), line: 1, col: value_col };
                Node::new(loc, Value::Str(value_text.to_string()))
            }
            Err(e) => return Err(e),
        };
        Ok(Override { path, value, path_loc })
    }

    /// An override from a dedicated flag (`--max-steps 500`): `flag` is the text shown in errors.
    pub fn flag(flag: &str, path: FieldPath, value: Value) -> Self {
        let loc = Location { origin: Origin::CommandLine(flag.into()), line: 1, col: 1 };
        Override { path, value: Node::new(loc.clone(), value), path_loc: loc }
    }

    /// An override of one field taken from a value written elsewhere (a field of
    /// `engine predict --input Idx(...)`): errors point where the field was written.
    pub fn field(path: FieldPath, field: &Field) -> Self {
        Override { path, value: field.value.clone(), path_loc: field.name_loc.clone() }
    }

    /// Replaces (or adds) the value at the path. Missing struct fields on the way are
    /// created, so `--set eval_spec.steps=10` works when the file has no `eval_spec`.
    pub fn apply(&self, root: &mut Node) -> Result<(), SpecError> {
        let mut node = root;
        let mut walked = FieldPath::root();
        for segment in self.path.segments() {
            node = self.step(node, segment, &walked)?;
            walked = walked.join(segment.clone());
        }
        *node = self.value.clone();
        Ok(())
    }

    fn step<'n>(&self, node: &'n mut Node, segment: &Segment, walked: &FieldPath) -> Result<&'n mut Node, SpecError> {
        // `Some(x)` is transparent to paths, as in the deserializer.
        if matches!(&node.value, Value::Tuple { name: Some(n), items } if n == "Some" && items.len() == 1) {
            return match &mut node.value {
                Value::Tuple { items, .. } if !items.is_empty() => self.step(&mut items[0], segment, walked),
                _ => Err(self.error(walked, "`Some(...)` without a value".to_string())),
            };
        }
        // A unit variant or `()` gains fields when one is set: `optimizer.momentum=0.9` on `Adam`.
        if matches!(segment, Segment::Field(_)) {
            let name = match &node.value {
                Value::Ident(n) if n != "None" => Some(Some(n.clone())),
                Value::Tuple { name, items } if items.is_empty() => Some(name.clone()),
                _ => None,
            };
            if let Some(name) = name {
                node.value = Value::Struct { name, fields: Vec::new() };
            }
        }
        let describe = node.value.describe();
        let empty = || Node::new(self.path_loc.clone(), Value::Tuple { name: None, items: Vec::new() });
        match (segment, &mut node.value) {
            (Segment::Field(name), Value::Struct { fields, .. }) => {
                let at = match fields.iter().position(|f| &f.name == name) {
                    Some(at) => at,
                    None => {
                        fields.push(Field { name: name.clone(), name_loc: self.path_loc.clone(), value: empty() });
                        fields.len() - 1
                    }
                };
                Ok(&mut fields[at].value)
            }
            (Segment::Field(key) | Segment::Key(key), Value::Map(entries)) => {
                let at = match entries.iter().position(|(k, _)| matches!(&k.value, Value::Str(s) if s == key)) {
                    Some(at) => at,
                    None => {
                        let k = Node::new(self.path_loc.clone(), Value::Str(key.clone()));
                        entries.push((k, empty()));
                        entries.len() - 1
                    }
                };
                Ok(&mut entries[at].1)
            }
            (Segment::Index(i) | Segment::Elem(i), Value::List(items) | Value::Tuple { items, .. }) => {
                let len = items.len();
                items.get_mut(*i).ok_or_else(|| {
                    self.error(walked, format!("index {i} is out of range: `{walked}` has {len} element(s)"))
                })
            }
            _ => {
                Err(self
                    .error(walked, format!("`{}` is {describe}, which has no part `{}`", shown(walked), last(segment))))
            }
        }
    }

    fn error(&self, walked: &FieldPath, message: String) -> SpecError {
        SpecError::new(Some(self.path_loc.clone()), walked.clone(), ErrorKind::Override(message))
    }
}

fn shown(path: &FieldPath) -> String {
    if path.is_root() { "the job".to_string() } else { path.to_string() }
}

fn last(segment: &Segment) -> String {
    FieldPath::root().join(segment.clone()).to_string()
}
