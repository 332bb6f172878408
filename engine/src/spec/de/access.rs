//! serde's access traits over lists, tuples, struct fields, maps and enum variants; each
//! hands its children the path one segment further down.

use super::{DeError, ValueDe};
use crate::spec::{
    FieldPath, Location,
    syntax::{Field, Node, Value},
};
use serde::de::{self, DeserializeSeed, Visitor};

pub struct SeqDe<'a> {
    items: &'a [Node],
    next: usize,
    path: &'a FieldPath,
    tuple: bool,
}

impl<'a> SeqDe<'a> {
    pub fn new(items: &'a [Node], path: &'a FieldPath, tuple: bool) -> Self {
        SeqDe { items, next: 0, path, tuple }
    }

    /// serde's tuple visitors stop reading once they have what they need; extra elements
    /// would silently vanish, so they are an error here.
    pub fn finish(&self) -> Result<(), DeError> {
        if self.next < self.items.len() {
            let extra = &self.items[self.next];
            return Err(DeError::wrong_type(
                format!("{} element(s)", self.next),
                format!("{} (an extra element)", extra.value.describe()),
            )
            .at(&self.child_path(self.next), &extra.loc));
        }
        Ok(())
    }

    fn child_path(&self, i: usize) -> FieldPath {
        if self.tuple { self.path.elem(i) } else { self.path.index(i) }
    }
}

impl<'de, 'a> de::SeqAccess<'de> for SeqDe<'a> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, DeError> {
        let Some(node) = self.items.get(self.next) else { return Ok(None) };
        let path = self.child_path(self.next);
        self.next += 1;
        seed.deserialize(ValueDe::new(node, path)).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len() - self.next)
    }
}

/// The fields of a struct: keys are identifiers located at the field name.
pub struct FieldsDe<'a> {
    fields: &'a [Field],
    next: usize,
    path: &'a FieldPath,
}

impl<'a> FieldsDe<'a> {
    pub fn new(fields: &'a [Field], path: &'a FieldPath) -> Self {
        FieldsDe { fields, next: 0, path }
    }
}

impl<'de, 'a> de::MapAccess<'de> for FieldsDe<'a> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, DeError> {
        let Some(field) = self.fields.get(self.next) else { return Ok(None) };
        let ident = IdentDe { name: &field.name, loc: &field.name_loc, path: self.path.field(&field.name) };
        seed.deserialize(ident).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let field = &self.fields[self.next];
        self.next += 1;
        seed.deserialize(ValueDe::new(&field.value, self.path.field(&field.name)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.fields.len() - self.next)
    }
}

/// The entries of a `{...}` map.
pub struct MapDe<'a> {
    entries: &'a [(Node, Node)],
    next: usize,
    path: &'a FieldPath,
}

impl<'a> MapDe<'a> {
    pub fn new(entries: &'a [(Node, Node)], path: &'a FieldPath) -> Self {
        MapDe { entries, next: 0, path }
    }

    fn entry_path(&self, key: &Node) -> FieldPath {
        match &key.value {
            Value::Str(s) => self.path.key(s),
            other => self.path.key(&other.describe()),
        }
    }
}

impl<'de, 'a> de::MapAccess<'de> for MapDe<'a> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, DeError> {
        let Some((key, _)) = self.entries.get(self.next) else { return Ok(None) };
        seed.deserialize(ValueDe::new(key, self.entry_path(key))).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let (key, value) = &self.entries[self.next];
        self.next += 1;
        seed.deserialize(ValueDe::new(value, self.entry_path(key)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len() - self.next)
    }
}

/// A name (struct field or enum variant) with its position.
pub struct IdentDe<'a> {
    pub name: &'a str,
    pub loc: &'a Location,
    pub path: FieldPath,
}

impl<'de, 'a> de::Deserializer<'de> for IdentDe<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        v.visit_str(self.name).map_err(|e: DeError| e.at(&self.path, self.loc))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// An enum value: `Flatten`, `L2(0.01)`, `Dense(units: 3)`.
pub struct EnumDe<'a> {
    node: &'a Node,
    path: &'a FieldPath,
}

impl<'a> EnumDe<'a> {
    pub fn new(node: &'a Node, path: &'a FieldPath) -> Self {
        EnumDe { node, path }
    }
}

impl<'de, 'a> de::EnumAccess<'de> for EnumDe<'a> {
    type Error = DeError;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), DeError> {
        let name = self.node.value.name().unwrap_or_default();
        let ident = IdentDe { name, loc: &self.node.loc, path: self.path.clone() };
        Ok((seed.deserialize(ident)?, self))
    }
}

impl<'a> EnumDe<'a> {
    fn name(&self) -> &str {
        self.node.value.name().unwrap_or_default()
    }

    fn fail(&self, expected: String) -> DeError {
        DeError::wrong_type(expected, self.node.value.describe()).at(self.path, &self.node.loc)
    }
}

impl<'de, 'a> de::VariantAccess<'de> for EnumDe<'a> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match &self.node.value {
            Value::Ident(_) => Ok(()),
            Value::Tuple { items, .. } if items.is_empty() => Ok(()),
            _ => Err(self.fail(format!("`{}` with no arguments", self.name()))),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        match &self.node.value {
            Value::Tuple { items, .. } if items.len() == 1 => {
                seed.deserialize(ValueDe::new(&items[0], self.path.clone()))
            }
            // `Dense(units: 3)` is the struct `Dense { units: 3 }` wrapped in `Layer::Dense`.
            _ => seed.deserialize(ValueDe::body(self.node, self.path.clone())),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Tuple { items, .. } => {
                let mut seq = SeqDe::new(items, self.path, true);
                let out = v.visit_seq(&mut seq).map_err(|e| e.at(self.path, &self.node.loc))?;
                seq.finish()?;
                Ok(out)
            }
            _ => Err(self.fail(format!("`{}(...)` with arguments", self.name()))),
        }
    }

    fn struct_variant<V: Visitor<'de>>(self, _fields: &'static [&'static str], v: V) -> Result<V::Value, DeError> {
        let fields: &[Field] = match &self.node.value {
            Value::Struct { fields, .. } => fields,
            Value::Ident(_) => &[],
            Value::Tuple { items, .. } if items.is_empty() => &[],
            _ => return Err(self.fail(format!("`{}(field: value, ...)`", self.name()))),
        };
        v.visit_map(FieldsDe::new(fields, self.path)).map_err(|e| e.at(self.path, &self.node.loc))
    }
}
