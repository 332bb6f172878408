//! TensorFlow Serving's JSON: requests in row (`instances`) or columnar (`inputs`) form to
//! tensors, and results back, checked against the signature with errors a client can act on.

use super::super::predict::tensor_json;
use engine_estimator::export::{Signature, TensorSpec};
use engine_graph::{DType, HostData, HostTensor};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Which form the request used; the response answers in the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `{"instances": [...]}` answered with `{"predictions": [...]}`.
    Row,
    /// `{"inputs": ...}` answered with `{"outputs": ...}`.
    Columnar,
}

/// A parsed request: each input with its batch dimension first.
#[derive(Debug)]
pub struct Request {
    pub form: Form,
    pub inputs: BTreeMap<String, HostTensor>,
    pub rows: usize,
}

/// The most examples one request may carry (the body size bounds it too).
pub const MAX_INSTANCES: usize = 65_536;

/// A request in any form: decoded as it is read where it can be (`stream.rs`), else
/// through serde_json's tree.
#[cfg(test)]
pub fn parse_request(body: &[u8], signature: &Signature) -> Result<Request, String> {
    match super::stream::decode(body, signature) {
        super::stream::Decoded::Request(r) => Ok(r),
        super::stream::Decoded::Error(e) => Err(e),
        super::stream::Decoded::Other => parse_general(body, signature),
    }
}

/// A request in any form, through serde_json's tree (for what `stream.rs` does not take:
/// objects per instance, several inputs).
pub fn parse_general(body: &[u8], signature: &Signature) -> Result<Request, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not valid JSON: {e}"))?;
    let Value::Object(mut top) = value else {
        return Err(r#"the body must be a JSON object with "instances" or "inputs""#.into());
    };
    if let Some(name) = top.get("signature_name").and_then(Value::as_str)
        && name != "serving_default"
    {
        return Err(format!("unknown signature_name '{name}'; the model has 'serving_default'"));
    }
    let (form, inputs) = match (top.remove("instances"), top.remove("inputs")) {
        (Some(_), Some(_)) => return Err(r#"give "instances" or "inputs", not both"#.into()),
        (Some(instances), None) => (Form::Row, rows_to_columns(instances, signature)?),
        (None, Some(inputs)) => (Form::Columnar, columnar(inputs, signature)?),
        (None, None) => return Err(r#"the body has neither "instances" nor "inputs""#.into()),
    };
    if let Some(extra) = inputs.keys().find(|k| !signature.inputs.iter().any(|s| &s.name == *k)) {
        return Err(format!("unknown input '{extra}'; the model takes: {}", names(&signature.inputs)));
    }
    let mut tensors = BTreeMap::new();
    let mut rows = None;
    for spec in &signature.inputs {
        let value = inputs.get(spec.name.as_str()).ok_or_else(|| format!("missing input '{}'", spec.name))?;
        let t = tensor(value, spec)?;
        match rows {
            Some(r) if r != t.shape[0] => {
                return Err(format!("inputs disagree on the batch size: {r} and {} ('{}')", t.shape[0], spec.name));
            }
            _ => rows = Some(t.shape[0]),
        }
        tensors.insert(spec.name.clone(), t);
    }
    let rows = rows.unwrap_or(0);
    if rows == 0 {
        return Err("the request has no examples".into());
    }
    Ok(Request { form, inputs: tensors, rows })
}

fn names(specs: &[TensorSpec]) -> String {
    specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Row form: a list of examples, each the single input's value or an object of inputs.
fn rows_to_columns(instances: Value, signature: &Signature) -> Result<BTreeMap<String, Value>, String> {
    let Value::Array(instances) = instances else { return Err(r#""instances" must be a list"#.into()) };
    if instances.is_empty() {
        return Err("the request has no examples".into());
    }
    if instances.len() > MAX_INSTANCES {
        return Err(format!("{} instances; at most {MAX_INSTANCES} per request", instances.len()));
    }
    let mut columns: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let single = signature.inputs.len() == 1;
    for (i, instance) in instances.into_iter().enumerate() {
        match instance {
            Value::Object(fields) if !single || fields.contains_key(&signature.inputs[0].name) => {
                for (k, v) in fields {
                    columns.entry(k).or_default().push(v);
                }
            }
            Value::Object(_) => {
                return Err(format!("instance {i} is an object without the input '{}'", signature.inputs[0].name));
            }
            v if single => columns.entry(signature.inputs[0].name.clone()).or_default().push(v),
            _ => {
                return Err(format!(
                    "instance {i} must be an object naming the inputs ({}), as the model takes several",
                    names(&signature.inputs)
                ));
            }
        }
    }
    Ok(columns.into_iter().map(|(k, v)| (k, Value::Array(v))).collect())
}

/// Columnar form: the single input's batch, or an object of batches.
fn columnar(inputs: Value, signature: &Signature) -> Result<BTreeMap<String, Value>, String> {
    match inputs {
        Value::Object(fields) => Ok(fields.into_iter().collect()),
        v if signature.inputs.len() == 1 => Ok(BTreeMap::from([(signature.inputs[0].name.clone(), v)])),
        _ => Err(format!(r#""inputs" must be an object naming the inputs ({})"#, names(&signature.inputs))),
    }
}

/// A batch of one input: nested lists of `[batch, example shape...]`.
fn tensor(value: &Value, spec: &TensorSpec) -> Result<HostTensor, String> {
    let example = spec.example_shape();
    let Value::Array(batch) = value else {
        return Err(format!("input '{}' must be a list of examples", spec.name));
    };
    if batch.len() > MAX_INSTANCES {
        return Err(format!("{} examples; at most {MAX_INSTANCES} per request", batch.len()));
    }
    let mut shape = vec![batch.len()];
    shape.extend(&example);
    let mut data = match spec.dtype {
        DType::F32 => HostData::F32(Vec::with_capacity(shape.iter().product())),
        DType::I64 => HostData::I64(Vec::new()),
        DType::Bool => HostData::Bool(Vec::new()),
    };
    for (i, x) in batch.iter().enumerate() {
        flatten(x, &example, &mut data, &|| format!("input '{}', example {i}", spec.name), spec)?;
    }
    HostTensor::new(shape, data).map_err(|e| e.to_string())
}

fn flatten(
    v: &Value,
    shape: &[usize],
    out: &mut HostData,
    at: &dyn Fn() -> String,
    spec: &TensorSpec,
) -> Result<(), String> {
    let want = || {
        format!(
            "must have shape [{}] of {}",
            spec.example_shape().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
            spec.dtype
        )
    };
    match shape.split_first() {
        Some((&n, rest)) => {
            let Value::Array(items) = v else { return Err(format!("{}: {}", at(), want())) };
            if items.len() != n {
                return Err(format!("{}: found a list of {} where {n} were expected; {}", at(), items.len(), want()));
            }
            items.iter().try_for_each(|x| flatten(x, rest, out, at, spec))
        }
        None => {
            // A number past f32's range would enter the model as an infinity and come back as
            // plausible-looking or null logits: refused, naming where it is.
            if let (HostData::F32(_), Value::Number(n)) = (&*out, v)
                && n.as_f64().is_some_and(|x| !(x as f32).is_finite())
            {
                return Err(format!(
                    "{}: {n} is outside the range of f32 (about ±3.4e38), which the model computes in",
                    at()
                ));
            }
            let ok = match (out, v) {
                (HostData::F32(d), Value::Number(n)) => n.as_f64().map(|x| d.push(x as f32)).is_some(),
                (HostData::I64(d), Value::Number(n)) => n.as_i64().map(|x| d.push(x)).is_some(),
                (HostData::Bool(d), Value::Bool(b)) => {
                    d.push(*b);
                    true
                }
                _ => false,
            };
            if ok {
                Ok(())
            } else {
                Err(format!("{}: found {v} where a {} was expected; {}", at(), spec.dtype, want()))
            }
        }
    }
}

/// The first example whose float outputs are not all finite, as an error for the client:
/// inputs inside f32's range can still overflow in the model (-3e38 per pixel does), and a
/// `null` logit with a class 0 beside it would be a wrong answer given as a right one.
pub fn check_outputs(outputs: &BTreeMap<String, HostTensor>, rows: usize) -> Result<(), String> {
    for (name, t) in outputs {
        let Some(values) = t.as_f32() else { continue };
        let per_row = values.len() / rows.max(1);
        if let Some(at) = values.iter().position(|x| !x.is_finite()) {
            let example = at.checked_div(per_row).unwrap_or(0);
            return Err(format!(
                "example {example}: output '{name}' is not finite ({}): its inputs are outside the range \
                 the model can compute with (values far from those it was trained on)",
                values[at]
            ));
        }
    }
    Ok(())
}

/// The response body: every output, in the request's form. With `classes` (a label
/// vocabulary), the `classes` output is answered by name and its ids as `class_ids`, as
/// `engine predict` writes them.
pub fn response(form: Form, outputs: &BTreeMap<String, HostTensor>, classes: Option<&[String]>) -> Value {
    let one_or_object = |mut m: Map<String, Value>| {
        if m.len() == 1 { m.values_mut().next().map(std::mem::take).unwrap_or_default() } else { Value::Object(m) }
    };
    let named = |m: Map<String, Value>| match classes {
        Some(names) => name_classes(m, names),
        None => m,
    };
    match form {
        Form::Columnar => {
            let m = outputs.iter().map(|(k, t)| (k.clone(), tensor_json(t))).collect();
            serde_json::json!({ "outputs": one_or_object(named(m)) })
        }
        Form::Row => {
            let rows = outputs.values().next().map_or(0, |t| t.shape.first().copied().unwrap_or(0));
            let predictions: Vec<Value> = (0..rows)
                .map(|r| {
                    let m = outputs
                        .iter()
                        .map(|(k, t)| {
                            let row = t.rows(r, 1).map(|mut x| {
                                x.shape.remove(0);
                                tensor_json(&x)
                            });
                            (k.clone(), row.unwrap_or(Value::Null))
                        })
                        .collect();
                    one_or_object(named(m))
                })
                .collect();
            serde_json::json!({ "predictions": predictions })
        }
    }
}

/// `classes` by name (ids past the vocabulary stay numbers), with the ids as `class_ids`.
fn name_classes(mut m: Map<String, Value>, names: &[String]) -> Map<String, Value> {
    fn name(v: &Value, names: &[String]) -> Value {
        match v {
            Value::Array(items) => Value::Array(items.iter().map(|x| name(x, names)).collect()),
            Value::Number(n) => n
                .as_u64()
                .and_then(|i| names.get(usize::try_from(i).ok()?))
                .map_or_else(|| v.clone(), |c| Value::String(c.clone())),
            other => other.clone(),
        }
    }
    if let Some(ids) = m.remove(CLASSES) {
        m.insert(CLASSES.into(), name(&ids, names));
        m.insert("class_ids".into(), ids);
    }
    m
}

/// The output a classifier's class ids are under.
pub const CLASSES: &str = "classes";

#[cfg(test)]
mod tests {
    use super::*;

    fn signature() -> Signature {
        Signature {
            inputs: vec![TensorSpec { name: "x".into(), dtype: DType::F32, shape: vec![-1, 2] }],
            outputs: vec![TensorSpec { name: "classes".into(), dtype: DType::I64, shape: vec![-1] }],
        }
    }

    #[test]
    fn both_forms_parse_and_answer_in_kind() {
        let s = signature();
        let r = parse_request(br#"{"instances": [[1, 2], [3.5, 4]]}"#, &s).unwrap();
        assert_eq!((r.form, r.rows), (Form::Row, 2));
        assert_eq!(r.inputs["x"].data, HostData::F32(vec![1.0, 2.0, 3.5, 4.0]));
        let r = parse_request(br#"{"instances": [{"x": [1, 2]}]}"#, &s).unwrap();
        assert_eq!(r.rows, 1);
        let r = parse_request(br#"{"inputs": {"x": [[1, 2]]}}"#, &s).unwrap();
        assert_eq!((r.form, r.rows), (Form::Columnar, 1));
        let out = BTreeMap::from([("classes".to_string(), HostTensor::i64(vec![2], vec![7, 1]).unwrap())]);
        assert_eq!(response(Form::Row, &out, None), serde_json::json!({"predictions": [7, 1]}));
        assert_eq!(response(Form::Columnar, &out, None), serde_json::json!({"outputs": [7, 1]}));
        // With a vocabulary, classes by name and their ids beside them, in either form.
        let names: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
        assert_eq!(
            response(Form::Row, &out, Some(&names)),
            serde_json::json!({"predictions": [{"classes": "c7", "class_ids": 7}, {"classes": "c1", "class_ids": 1}]})
        );
        assert_eq!(
            response(Form::Columnar, &out, Some(&names)),
            serde_json::json!({"outputs": {"classes": ["c7", "c1"], "class_ids": [7, 1]}})
        );
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let s = signature();
        let err = |body: &str| parse_request(body.as_bytes(), &s).unwrap_err();
        assert!(err("{").contains("not valid JSON"));
        assert!(err(r#"{"instances": [[1, 2, 3]]}"#).contains("a list of 3 where 2 were expected"));
        assert!(err(r#"{"instances": [["a", 2]]}"#).contains("where a f32 was expected"));
        assert!(err(r#"{"instances": []}"#).contains("no examples"));
        assert!(err(r#"{"inputs": {"y": [[1, 2]]}}"#).contains("unknown input 'y'"));
        assert!(err(r#"{"inputs": {}}"#).contains("missing input 'x'"));
        assert!(err(r#"{"inputs": {"x": [[1, 2]], "y": 1}}"#).contains("unknown input 'y'"));
        assert!(err(r#"[1]"#).contains("JSON object"));
        let e = err(r#"{"instances": [[1, 2], [1e300, 0]]}"#);
        assert!(e.contains("example 1") && e.contains("outside the range of f32"), "{e}");
        assert!(err(r#"{"instances": [[1, -1e39]]}"#).contains("outside the range of f32"));
        assert!(parse_request(br#"{"instances": [[1, -3e38]]}"#, &s).is_ok());
    }

    /// The streaming decoder (one input, lists of numbers) and the general one (objects,
    /// several inputs) read the same tensor; an instance given as an object falls back.
    #[test]
    fn both_decoders_agree() {
        let s = signature();
        let fast =
            parse_request(br#"{"instances": [[1, 2.5], [3, -4]], "signature_name": "serving_default"}"#, &s).unwrap();
        let general = parse_request(br#"{"instances": [{"x": [1, 2.5]}, {"x": [3, -4]}]}"#, &s).unwrap();
        assert_eq!(fast.inputs, general.inputs);
        assert_eq!((fast.form, fast.rows), (Form::Row, 2));
        let columnar = parse_request(br#"{"inputs": [[1, 2.5], [3, -4]]}"#, &s).unwrap();
        assert_eq!((columnar.form, &columnar.inputs), (Form::Columnar, &fast.inputs));
        let err = |body: &str| parse_request(body.as_bytes(), &s).unwrap_err();
        assert!(err(r#"{"instances": [[1, 2], 7]}"#).contains("example 1: found the number 7 where 2 were expected"));
        assert!(err(r#"{"instances": [[1, [2]]]}"#).contains("found a list where a f32 was expected"));
        assert!(err(r#"{"instances": [[1, 2]], "signature_name": "other"}"#).contains("unknown signature_name"));
        assert!(err(r#"{"instances": [[1, 2]]} trailing"#).contains("not valid JSON"));
    }

    #[test]
    fn non_finite_outputs_name_the_example() {
        let ok =
            BTreeMap::from([("logits".to_string(), HostTensor::f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap())]);
        assert!(check_outputs(&ok, 2).is_ok());
        let bad = BTreeMap::from([(
            "logits".to_string(),
            HostTensor::f32(vec![2, 2], vec![1.0, 2.0, f32::NAN, 4.0]).unwrap(),
        )]);
        let e = check_outputs(&bad, 2).unwrap_err();
        assert!(e.contains("example 1") && e.contains("'logits' is not finite"), "{e}");
    }
}
