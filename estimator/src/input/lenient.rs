//! Optional spec fields written either bare (`label: "species"`) or as RON options
//! (`label: Some("species")`, `label: None`): RON requires `Some(...)` for an `Option`
//! unless the reader enables `implicit_some`, and a job spec should not depend on that.

use serde::de::value::{EnumAccessDeserializer, MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserialize, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use std::marker::PhantomData;

/// Reads `None`, `Some(value)` or a bare `value`. A visitor rather than an untagged enum:
/// the value is deserialized inside the field's own deserializer, so a wrong type is
/// reported at the field (`train_input.take: expected ...`), not as "data did not match any
/// variant of untagged enum" at the section.
pub(crate) fn option<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    deserializer.deserialize_any(BareOrOption(PhantomData))
}

struct BareOrOption<T>(PhantomData<T>);

macro_rules! bare {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method<E: serde::de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            T::deserialize(v.into_deserializer()).map(Some)
        })*
    };
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for BareOrOption<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a value, Some(value) or None")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        T::deserialize(deserializer).map(Some)
    }

    bare!(visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64), visit_char(char), visit_string(String));

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        T::deserialize(v.to_string().into_deserializer()).map(Some)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        T::deserialize(SeqAccessDeserializer::new(seq)).map(Some)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Some)
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        T::deserialize(EnumAccessDeserializer::new(data)).map(Some)
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    struct Section {
        #[serde(default, deserialize_with = "super::option")]
        take: Option<u64>,
        #[serde(default, deserialize_with = "super::option")]
        columns: Option<Vec<String>>,
    }

    #[test]
    fn bare_and_option_forms_are_read_and_a_wrong_type_says_what_was_expected() {
        let read = |text: &str| ron::from_str::<Section>(text);
        assert_eq!(read("(take: 5)").map(|s| s.take).ok(), Some(Some(5)));
        assert_eq!(read("(take: Some(5))").map(|s| s.take).ok(), Some(Some(5)));
        assert_eq!(read("(take: None)").map(|s| s.take).ok(), Some(None));
        let err = read(r#"(take: "abc")"#).unwrap_err().to_string();
        assert!(err.to_lowercase().contains("expected u64") && !err.contains("untagged"), "{err}");
        let err = read("(columns: 3)").unwrap_err().to_string();
        assert!(err.to_lowercase().contains("expected a sequence"), "{err}");
        let columns = read(r#"(columns: ["a"])"#).ok().and_then(|s| s.columns);
        assert_eq!(columns, Some(vec!["a".to_string()]));
    }
}
