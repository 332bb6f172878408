//! Optional spec fields written either bare (`label: "species"`) or as RON options
//! (`label: Some("species")`, `label: None`): RON requires `Some(...)` for an `Option`
//! unless the reader enables `implicit_some`, and a job spec should not depend on that.

use serde::{Deserialize, Deserializer};

#[derive(Deserialize)]
#[serde(untagged)]
enum BareOrOption<T> {
    Bare(T),
    Option(Option<T>),
}

pub(crate) fn option<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(match BareOrOption::deserialize(deserializer)? {
        BareOrOption::Bare(value) => Some(value),
        BareOrOption::Option(value) => value,
    })
}
