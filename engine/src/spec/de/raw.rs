//! Sections of a spec that another layer interprets (input pipelines, hooks).
//!
//! The job spec checks their kind against a list of names and remembers where they are;
//! the layer that owns them deserializes the subtree later with [`crate::spec::Spec::decode`],
//! getting the same located errors as the rest of the spec.

use crate::spec::FieldPath;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use std::{fmt, marker::PhantomData};

/// The prefix of the newtype-struct name by which [`RawSection`] asks our deserializer for
/// its path and kind; what follows it names the section for messages.
pub const RAW_SECTION: &str = "$engine::RawSection:";

/// The names a section may start with (`Idx`, `Csv`, ...); empty accepts any name.
pub trait SectionKinds {
    /// [`RAW_SECTION`] followed by what the section is, for messages:
    /// `"$engine::RawSection:input source"`.
    const TAG: &'static str;
    const KINDS: &'static [&'static str];
}

/// A section kept for later: its path in the spec and the name it is written with.
pub struct RawSection<K> {
    pub path: FieldPath,
    pub kind: String,
    marker: PhantomData<K>,
}

impl<K> fmt::Debug for RawSection<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawSection").field("path", &self.path.to_string()).field("kind", &self.kind).finish()
    }
}

impl<K> Clone for RawSection<K> {
    fn clone(&self) -> Self {
        RawSection { path: self.path.clone(), kind: self.kind.clone(), marker: PhantomData }
    }
}

impl<K> PartialEq for RawSection<K> {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.kind == other.kind
    }
}

impl<'de, K: SectionKinds> Deserialize<'de> for RawSection<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_newtype_struct(K::TAG, RawVisitor(PhantomData::<K>))
    }
}

struct RawVisitor<K>(PhantomData<K>);

impl<'de, K: SectionKinds> Visitor<'de> for RawVisitor<K> {
    type Value = RawSection<K>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = K::TAG.strip_prefix(RAW_SECTION).unwrap_or("section");
        if K::KINDS.is_empty() {
            write!(f, "{} such as `Name(field: value, ...)`", super::with_article(what))
        } else {
            write!(f, "{} (one of: {})", super::with_article(what), K::KINDS.join(", "))
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut path = None;
        let mut kind = None;
        while let Some((k, v)) = map.next_entry::<String, String>()? {
            match k.as_str() {
                "path" => path = Some(v),
                "kind" => kind = Some(v),
                _ => {}
            }
        }
        let path = path.ok_or_else(|| de::Error::custom("sections can only be read from a job spec"))?;
        let path =
            if path.is_empty() { FieldPath::root() } else { FieldPath::parse(&path).map_err(de::Error::custom)? };
        let kind = kind.unwrap_or_default();
        if kind.is_empty() {
            return Err(de::Error::invalid_type(de::Unexpected::Other("a value without a name"), &self));
        }
        if !K::KINDS.is_empty() && !K::KINDS.contains(&kind.as_str()) {
            return Err(de::Error::unknown_variant(&kind, K::KINDS));
        }
        Ok(RawSection { path, kind, marker: PhantomData })
    }
}
