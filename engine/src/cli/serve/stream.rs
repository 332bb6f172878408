//! The common request, decoded straight into its tensor: `{"instances": [...]}` or
//! `{"inputs": [...]}` for a model with one input, each example a nested list of numbers.
//!
//! serde_json's `Value` tree of such a body is about fifty times its text (a `Value` and a
//! vector for every pixel of a `[28, 28, 1]` image): one 60.9 MiB request of 20,000 images
//! took the server to 3.0 GB. Decoded as it is read, numbers go to the input's buffer as
//! they come, with the shape checked on the way: the request holds its text and its tensor.
//! Every other form (objects per instance, several inputs, unknown fields) is left to the
//! general decoder in `json.rs`, which gives the same errors.

use super::json::{Form, MAX_INSTANCES, Request};
use engine_estimator::export::{Signature, TensorSpec};
use engine_graph::{DType, HostData, HostTensor};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;

/// What the fast path hands back: a request, an error for the client, or "not this form".
pub enum Decoded {
    Request(Request),
    Error(String),
    /// The body is of another form: decode it the general way.
    Other,
}

/// The marker error that sends a body to the general decoder.
const OTHER: &str = "\u{0}other form";

pub fn decode(body: &[u8], signature: &Signature) -> Decoded {
    let [spec] = &signature.inputs[..] else { return Decoded::Other };
    let object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if spec.dtype == DType::Bool || !object {
        return Decoded::Other;
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = TopLevel { spec }.deserialize(&mut de).and_then(|r| de.end().map(|()| r));
    match parsed {
        Ok((form, tensor)) => {
            let rows = tensor.shape[0];
            if rows == 0 {
                return Decoded::Error("the request has no examples".into());
            }
            Decoded::Request(Request { form, inputs: BTreeMap::from([(spec.name.clone(), tensor)]), rows })
        }
        Err(e) if e.to_string().starts_with(OTHER) => Decoded::Other,
        Err(e) if e.is_syntax() || e.is_eof() => Decoded::Error(format!("the body is not valid JSON: {e}")),
        Err(e) => Decoded::Error(e.to_string()),
    }
}

fn other<E: de::Error>() -> E {
    E::custom(OTHER)
}

/// `{"instances": [...]}` or `{"inputs": [...]}`, with an optional `signature_name`.
struct TopLevel<'a> {
    spec: &'a TensorSpec,
}

impl<'de> DeserializeSeed<'de> for TopLevel<'_> {
    type Value = (Form, HostTensor);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = (Form, HostTensor);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "instances" | "inputs" if found.is_none() => {
                    let form = if key == "instances" { Form::Row } else { Form::Columnar };
                    found = Some((form, map.next_value_seed(Batch { spec: self.spec })?));
                }
                "signature_name" => {
                    let name: String = map.next_value()?;
                    if name != "serving_default" {
                        return Err(other());
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    return Err(other());
                }
            }
        }
        found.ok_or_else(other)
    }
}

/// A list of examples of `spec`'s shape, into one tensor.
struct Batch<'a> {
    spec: &'a TensorSpec,
}

impl<'de> DeserializeSeed<'de> for Batch<'_> {
    type Value = HostTensor;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Batch<'_> {
    type Value = HostTensor;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list of examples for input '{}'", self.spec.name)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let example = self.spec.example_shape();
        let mut values = match self.spec.dtype {
            DType::I64 => HostData::I64(Vec::new()),
            _ => HostData::F32(Vec::new()),
        };
        let mut rows = 0;
        loop {
            let at = Example { spec: self.spec, shape: &example, index: rows, out: &mut values };
            if seq.next_element_seed(at)?.is_none() {
                break;
            }
            rows += 1;
            if rows > MAX_INSTANCES {
                return Err(de::Error::custom(format!(
                    "more than {MAX_INSTANCES} examples; at most {MAX_INSTANCES} per request"
                )));
            }
        }
        let mut shape = vec![rows];
        shape.extend(&example);
        HostTensor::new(shape, values).map_err(de::Error::custom)
    }
    /// A single example given bare, or an object of inputs: the general decoder's forms.
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(other())
    }
}

/// One example (or, below the top, one of its nested lists): `shape` is what is left.
struct Example<'a> {
    spec: &'a TensorSpec,
    shape: &'a [usize],
    index: usize,
    out: &'a mut HostData,
}

impl Example<'_> {
    /// The general decoder's message for a value of the wrong kind or length here.
    fn wrong<E: de::Error>(&self, found: impl fmt::Display) -> E {
        let dims: Vec<String> = self.spec.example_shape().iter().map(|d| d.to_string()).collect();
        let expected = match self.shape.first() {
            Some(n) => format!("{n} were expected"),
            None => format!("a {} was expected", self.spec.dtype),
        };
        E::custom(format!(
            "input '{}', example {}: found {found} where {expected}; must have shape [{}] of {}",
            self.spec.name,
            self.index,
            dims.join(", "),
            self.spec.dtype
        ))
    }

    fn number<E: de::Error>(self, x: f64, exact: Option<i64>) -> Result<(), E> {
        if !self.shape.is_empty() {
            return Err(self.wrong(format!("the number {x}")));
        }
        match self.out {
            HostData::F32(v) => {
                if !(x as f32).is_finite() {
                    return Err(E::custom(format!(
                        "input '{}', example {}: {x} is outside the range of f32 (about ±3.4e38), which the model \
                         computes in",
                        self.spec.name, self.index
                    )));
                }
                v.push(x as f32);
            }
            HostData::I64(v) => match exact {
                Some(i) => v.push(i),
                None => return Err(self.wrong(format!("the number {x}"))),
            },
            HostData::Bool(_) => return Err(other()),
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Example<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Example<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a nested list of numbers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((&n, rest)) = self.shape.split_first() else { return Err(self.wrong("a list")) };
        let mut seen = 0;
        loop {
            let inner = Example { spec: self.spec, shape: rest, index: self.index, out: &mut *self.out };
            if seq.next_element_seed(inner)?.is_none() {
                break;
            }
            seen += 1;
            if seen > n {
                // Counted to the end, for the message.
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    seen += 1;
                }
                break;
            }
        }
        if seen != n {
            return Err(self.wrong(format!("a list of {seen}")));
        }
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, x: f64) -> Result<(), E> {
        self.number(x, None)
    }
    fn visit_i64<E: de::Error>(self, x: i64) -> Result<(), E> {
        self.number(x as f64, Some(x))
    }
    fn visit_u64<E: de::Error>(self, x: u64) -> Result<(), E> {
        self.number(x as f64, i64::try_from(x).ok())
    }
    /// An object where an example belongs: an instance naming its inputs.
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(other())
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        Err(self.wrong(format!("\"{s}\"")))
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        Err(self.wrong(b))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(self.wrong("null"))
    }
}
