//! A serde deserializer over the located value tree.
//!
//! It tracks the field path as it descends and attaches the path and position to every
//! error on the way out (see [`error`]), so serde's derived impls give located errors
//! for unknown fields, missing fields, wrong types and unknown names without any help
//! from the spec types.

mod access;
mod error;
mod raw;

pub use error::DeError;
pub use raw::{RAW_SECTION, RawSection, SectionKinds};

use crate::spec::{FieldPath, Origin, SpecError, syntax::Node, syntax::Value};
use access::{EnumDe, FieldsDe, MapDe, SeqDe};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};

/// Deserializes `node` (found at `path`) into `T`, with located errors.
pub fn from_node<T: DeserializeOwned>(node: &Node, path: FieldPath) -> Result<T, SpecError> {
    T::deserialize(ValueDe::new(node, path)).map_err(DeError::into_spec_error)
}

/// How to read a node. The body of a variant (`Dense(units: 3)` read as the struct
/// `Dense`) is a struct whatever its name, and an absent body (`Concatenate`) is an empty
/// struct whose fields all take their defaults.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum View {
    Value,
    VariantBody,
}

pub struct ValueDe<'a> {
    node: &'a Node,
    path: FieldPath,
    view: View,
}

impl<'a> ValueDe<'a> {
    pub fn new(node: &'a Node, path: FieldPath) -> Self {
        ValueDe { node, path, view: View::Value }
    }

    fn body(node: &'a Node, path: FieldPath) -> Self {
        ValueDe { node, path, view: View::VariantBody }
    }

    fn child(&self, node: &'a Node, path: FieldPath) -> ValueDe<'a> {
        ValueDe::new(node, path)
    }

    fn locate(&self, e: DeError) -> DeError {
        e.at_node(&self.path, self.node)
    }

    fn wrong(&self, expected: &str) -> DeError {
        DeError::wrong_type(expected, self.node.value.describe())
    }

    fn seq<'de, V: Visitor<'de>>(&self, items: &'a [Node], tuple: bool, v: V) -> Result<V::Value, DeError> {
        let mut seq = SeqDe::new(items, &self.path, tuple);
        let out = v.visit_seq(&mut seq)?;
        seq.finish()?;
        Ok(out)
    }

    fn fields<'de, V: Visitor<'de>>(
        &self,
        fields: &'a [crate::spec::syntax::Field],
        v: V,
    ) -> Result<V::Value, DeError> {
        v.visit_map(FieldsDe::new(fields, &self.path))
    }

    fn any<'de, V: Visitor<'de>>(&self, v: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Bool(b) => v.visit_bool(*b),
            Value::Int(i) => {
                if let Ok(u) = u64::try_from(*i) {
                    v.visit_u64(u)
                } else if let Ok(s) = i64::try_from(*i) {
                    v.visit_i64(s)
                } else {
                    Err(DeError::wrong_type("an integer that fits in 64 bits", self.node.value.describe()))
                }
            }
            Value::Float(x) => v.visit_f64(*x),
            Value::Str(s) => v.visit_str(s),
            Value::Char(c) => v.visit_char(*c),
            Value::List(items) => self.seq(items, false, v),
            Value::Map(entries) => v.visit_map(MapDe::new(entries, &self.path)),
            Value::Tuple { name: Some(n), items } if n == "Some" && items.len() == 1 && self.view == View::Value => {
                v.visit_some(self.child(&items[0], self.path.clone()))
            }
            Value::Ident(n) if n == "None" && self.view == View::Value => v.visit_none(),
            // A bare word on the command line is a string where one is expected; handed on as
            // one where the type is not known yet (a buffered, flattened section), it still
            // names a unit variant when an enum reads it.
            Value::Ident(n) if self.view == View::Value && matches!(self.node.loc.origin, Origin::CommandLine(_)) => {
                v.visit_str(n)
            }
            Value::Struct { name: Some(_), .. } | Value::Tuple { name: Some(_), .. } | Value::Ident(_)
                if self.view == View::Value =>
            {
                v.visit_enum(EnumDe::new(self.node, &self.path))
            }
            Value::Struct { fields, .. } => self.fields(fields, v),
            Value::Tuple { items, .. } => self.seq(items, true, v),
            Value::Ident(_) => self.fields(&[], v),
        }
    }

    fn option<'de, V: Visitor<'de>>(&self, v: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Ident(n) if n == "None" => v.visit_none(),
            Value::Tuple { name: Some(n), items } if n == "Some" && items.len() == 1 => {
                v.visit_some(self.child(&items[0], self.path.clone()))
            }
            // RON's `implicit_some`: `steps: 100` for an `Option` field.
            _ => v.visit_some(ValueDe::new(self.node, self.path.clone())),
        }
    }

    fn structure<'de, V: Visitor<'de>>(&self, name: &str, v: V) -> Result<V::Value, DeError> {
        let check_name = |written: &Option<String>| match written {
            Some(w) if w != name && self.view == View::Value => {
                Err(DeError::wrong_type(format!("`{name}(...)`"), format!("`{w}(...)`")))
            }
            _ => Ok(()),
        };
        match &self.node.value {
            Value::Struct { name: written, fields } => {
                check_name(written)?;
                self.fields(fields, v)
            }
            Value::Tuple { name: written, items } if items.is_empty() => {
                check_name(written)?;
                self.fields(&[], v)
            }
            Value::Ident(w) if self.view == View::VariantBody || w == name => self.fields(&[], v),
            _ => Err(self.wrong(&format!("`{name}(field: value, ...)`"))),
        }
    }

    fn sequence<'de, V: Visitor<'de>>(&self, v: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::List(items) => self.seq(items, false, v),
            Value::Tuple { items, .. } => self.seq(items, true, v),
            _ => Err(self.wrong("a list `[...]` or a tuple `(...)`")),
        }
    }

    fn map<'de, V: Visitor<'de>>(&self, v: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Map(entries) => v.visit_map(MapDe::new(entries, &self.path)),
            Value::Struct { name: None, fields } => self.fields(fields, v),
            _ => Err(self.wrong("a map `{\"key\": value, ...}`")),
        }
    }

    fn enumeration<'de, V: Visitor<'de>>(
        &self,
        name: &str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        let what = friendly(name);
        match &self.node.value {
            Value::Ident(_) | Value::Tuple { name: Some(_), .. } | Value::Struct { name: Some(_), .. } => {
                v.visit_enum(EnumDe::new(self.node, &self.path))
            }
            // Not a name: the visitor decides. A derived enum refuses with "expected enum X",
            // replaced by the list of names; a hand-written one may accept a number (a
            // constant learning rate) or a string (a strategy name).
            _ => self.any(v).map_err(|e| {
                e.expecting_instead(|exp| {
                    exp.starts_with("enum ")
                        .then(|| format!("{} (one of: {})", with_article(&what), variants.join(", ")))
                })
            }),
        }
        .map_err(|e| self.locate(e).naming(&what))
    }

    fn unit<'de, V: Visitor<'de>>(&self, v: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Tuple { name: None, items } if items.is_empty() => v.visit_unit(),
            _ => Err(self.wrong("`()`")),
        }
    }

    fn newtype<'de, V: Visitor<'de>>(&self, name: &'static str, v: V) -> Result<V::Value, DeError> {
        if let Some(what) = name.strip_prefix(RAW_SECTION) {
            let entries = vec![
                ("path".to_string(), self.path.to_string()),
                ("kind".to_string(), self.node.value.name().unwrap_or_default().to_string()),
            ];
            let map = de::value::MapDeserializer::<_, DeError>::new(entries.into_iter());
            return v.visit_map(map).map_err(|e| e.naming(what));
        }
        match &self.node.value {
            Value::Tuple { name: Some(n), items } if n == name && items.len() == 1 => {
                v.visit_newtype_struct(self.child(&items[0], self.path.clone()))
            }
            _ => v.visit_newtype_struct(ValueDe { node: self.node, path: self.path.clone(), view: self.view }),
        }
    }

    /// On the command line a bare word is a string where a string is expected
    /// (`--set run_config.model_dir=runs`); in a file RON's quotes are required.
    fn string<'de, V: Visitor<'de>>(&self, v: V) -> Result<V::Value, DeError> {
        match (&self.node.value, &self.node.loc.origin) {
            (Value::Ident(word), Origin::CommandLine(_)) => v.visit_str(word),
            _ => self.any(v),
        }
    }

    fn identifier<'de, V: Visitor<'de>>(&self, v: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Ident(n) => v.visit_str(n),
            Value::Str(s) => v.visit_str(s),
            _ => Err(self.wrong("a name")),
        }
    }
}

/// `activation` -> `an activation`, `layer` -> `a layer`.
pub(super) fn with_article(noun: &str) -> String {
    let vowel = noun.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {noun}", if vowel { "an" } else { "a" })
}

/// `LearningRateSchedule` -> `learning rate schedule`, for messages.
fn friendly(type_name: &str) -> String {
    let mut out = String::new();
    for (i, c) in type_name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push(' ');
        }
        out.extend(c.to_lowercase());
    }
    out
}

macro_rules! forward_to {
    ($method:ident => $($name:ident),* $(,)?) => {
        $(fn $name<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
            self.$method(v).map_err(|e| self.locate(e))
        })*
    };
}

impl<'de, 'a> de::Deserializer<'de> for ValueDe<'a> {
    type Error = DeError;

    forward_to!(any => deserialize_any, deserialize_bool, deserialize_i8, deserialize_i16, deserialize_i32,
        deserialize_i64, deserialize_i128, deserialize_u8, deserialize_u16, deserialize_u32, deserialize_u64,
        deserialize_u128, deserialize_f32, deserialize_f64, deserialize_char, deserialize_bytes,
        deserialize_byte_buf);
    forward_to!(string => deserialize_str, deserialize_string);
    forward_to!(option => deserialize_option);
    forward_to!(unit => deserialize_unit);
    forward_to!(sequence => deserialize_seq);
    forward_to!(map => deserialize_map);
    forward_to!(identifier => deserialize_identifier);

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, v: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Ident(n) if n == name => v.visit_unit(),
            _ => self.unit(v),
        }
        .map_err(|e| self.locate(e))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, v: V) -> Result<V::Value, DeError> {
        self.newtype(name, v).map_err(|e| self.locate(e))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, DeError> {
        self.sequence(v).map_err(|e| self.locate(e))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _len: usize,
        v: V,
    ) -> Result<V::Value, DeError> {
        self.sequence(v).map_err(|e| self.locate(e))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        self.structure(name, v).map_err(|e| self.locate(e))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        self.enumeration(name, variants, v)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        v.visit_unit()
    }
}

impl<'de, 'a> IntoDeserializer<'de, DeError> for ValueDe<'a> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

#[cfg(test)]
mod tests;
