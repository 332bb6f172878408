//! `engine predict`: run the spec's model in prediction mode over an input (the spec's
//! `eval_input`, or `--input`) from a checkpoint, writing one JSON object per example
//! (JSON Lines) to `--output` or stdout.

use super::{
    CliError, DeviceArgs, SpecArgs,
    eval::{checkpoint_location, evaluation_estimator, missing_eval_input, model_dir_override},
};
use crate::{
    job,
    spec::{
        FieldPath, Origin, Override,
        syntax::{Value, parse_value},
    },
};
use clap::Args;
use engine_graph::{HostData, HostTensor};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct PredictArgs {
    #[command(flatten)]
    pub common: SpecArgs,
    /// The input, as an input section of the spec would be written:
    /// `Idx(images: "t10k-images-idx3-ubyte.gz", labels: "...", batch_size: 100)`.
    /// Defaults to the spec's `eval_input`.
    #[arg(long, value_name = "INPUT")]
    pub input: Option<String>,
    /// The checkpoint: a name in the model dir (`model.ckpt-200`) or a path or URL;
    /// defaults to the latest.
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<String>,
    /// The model directory (overrides `run_config.model_dir`).
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<String>,
    /// Write the predictions here (JSON Lines) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Which predictions to write (`classes,probabilities`); all by default.
    #[arg(long, value_name = "KEYS", value_delimiter = ',')]
    pub keys: Vec<String>,
    #[command(flatten)]
    pub devices: DeviceArgs,
}

impl PredictArgs {
    /// `--input` is parsed and checked like the spec's own section (errors point into the
    /// flag's text). Of the same kind as `eval_input`, it changes only the fields it names:
    /// the spec's transforms (`scale`, `maps`, `filters`, `batch_size`) still apply, so
    /// predictions see the inputs the model was trained on. Without `labels`, an `Idx`
    /// input reads images only. Of another kind, it would silently drop those transforms,
    /// and is refused.
    fn overrides(&self) -> Result<Vec<Override>, CliError> {
        let mut v = model_dir_override(self.model_dir.as_deref());
        let Some(text) = &self.input else { return Ok(v) };
        const FLAG: &str = "--input ";
        let shown = format!("{FLAG}{text}");
        let node = parse_value(text, &Origin::CommandLine(shown.as_str().into()), FLAG.chars().count() + 1)?;
        let at = FieldPath::root().field("eval_input");
        let base = self.common.load(v.clone())?;
        let spec_kind = base.job.eval_input.as_ref().and_then(|s| base.node(&s.path)).and_then(|n| match &n.value {
            Value::Struct { name, .. } | Value::Tuple { name, .. } => name.clone(),
            _ => None,
        });
        let Value::Struct { name: Some(kind), fields } = &node.value else {
            v.push(Override::flag(&shown, at, node.value));
            return Ok(v);
        };
        match spec_kind {
            Some(spec_kind) if spec_kind == *kind => {
                for f in fields {
                    v.push(Override::field(at.clone().field(&f.name), f));
                }
            }
            Some(spec_kind) => {
                return Err(CliError::Usage(format!(
                    "--input is {kind}(...) but the spec's eval_input is {spec_kind}(...), whose transforms (scale, \
                     maps, filters) would not apply: give --input as {spec_kind}(...) with the fields to change, or \
                     write the input in the spec's eval_input"
                )));
            }
            None => v.push(Override::flag(&shown, at.clone(), node.value.clone())),
        }
        if kind == "Idx" && !fields.iter().any(|f| f.name == "labels") {
            v.push(Override::flag(&shown, at.field("labels"), Value::Ident("None".into())));
        }
        Ok(v)
    }
}

pub fn predict(args: &PredictArgs) -> Result<(), CliError> {
    let spec = Arc::new(args.common.load(args.overrides()?)?);
    let estimator = evaluation_estimator(&spec, &args.common, &args.devices)?;
    let input = job::predict_input_fn(&spec)?.ok_or_else(|| missing_eval_input(&spec, "engine predict"))?;
    let checkpoint = checkpoint_location(&estimator, args.checkpoint.as_deref())?;
    let keys = if args.keys.is_empty() { None } else { Some(args.keys.clone()) };
    let predictions = estimator.predict(input.as_ref(), keys, Some(&checkpoint))?;
    let (sink, shown): (Box<dyn Write>, String) = match &args.output {
        Some(path) => {
            let file = std::fs::File::create(path)
                .map_err(|source| CliError::Write { path: path.display().to_string(), source })?;
            (Box::new(file), path.display().to_string())
        }
        None => (Box::new(std::io::stdout().lock()), "stdout".to_string()),
    };
    let mut out = BufWriter::new(sink);
    let write_error = |source: std::io::Error| CliError::Write { path: shown.clone(), source };
    let mut written = 0u64;
    let classes = job::label_vocabulary(&spec)?.map(|(_, classes)| classes);
    for example in predictions {
        let mut line = json_line(&example?);
        if let Some(classes) = &classes {
            name_classes(&mut line, classes);
        }
        match writeln!(out, "{line}") {
            Ok(()) => written += 1,
            // `engine predict ... | head`: the reader has what it wanted.
            Err(e) if e.kind() == ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(write_error(e)),
        }
    }
    match out.flush() {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => return Err(write_error(e)),
        _ => {}
    }
    log::info!("Wrote {written} predictions of {checkpoint} to {shown}");
    Ok(())
}

/// With string labels, `classes` becomes the class's string and `class_ids` its index, as
/// TensorFlow's classifiers with a `label_vocabulary` predict.
fn name_classes(line: &mut Json, classes: &[String]) {
    let Json::Object(map) = line else { return };
    let Some(id) = map.get("classes").cloned() else { return };
    let name = |id: &Json| id.as_u64().and_then(|i| classes.get(i as usize)).map(|c| Json::String(c.clone()));
    let named = match &id {
        Json::Array(ids) => ids.iter().map(name).collect::<Option<Vec<_>>>().map(Json::Array),
        id => name(id),
    };
    if let Some(named) = named {
        map.insert("class_ids".into(), id);
        map.insert("classes".into(), named);
    }
}

/// One example's predictions as a JSON object, keys in order.
fn json_line(example: &BTreeMap<String, HostTensor>) -> Json {
    Json::Object(example.iter().map(|(k, t)| (k.clone(), tensor_json(t))).collect())
}

/// A tensor as nested JSON arrays of its shape (a scalar as a number). Integers stay
/// integers; a non-finite float becomes `null`, which JSON has instead.
pub(super) fn tensor_json(t: &HostTensor) -> Json {
    let flat: Vec<Json> = match &t.data {
        HostData::F32(v) => v.iter().map(|&x| f32_json(x)).collect(),
        HostData::I64(v) => v.iter().map(|&x| Json::from(x)).collect(),
        HostData::Bool(v) => v.iter().map(|&x| Json::Bool(x)).collect(),
    };
    nest(&t.shape, &mut flat.into_iter())
}

/// The shortest decimal that reads back as the same f32 (`0.1`, not `0.10000000149011612`).
fn f32_json(x: f32) -> Json {
    let shortest: f64 = x.to_string().parse().unwrap_or(f64::NAN);
    serde_json::Number::from_f64(shortest).map_or(Json::Null, Json::Number)
}

fn nest(shape: &[usize], values: &mut impl Iterator<Item = Json>) -> Json {
    match shape.split_first() {
        None => values.next().unwrap_or(Json::Null),
        Some((&n, rest)) => Json::Array((0..n).map(|_| nest(rest, values)).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_become_nested_json_of_their_shape() -> Result<(), engine_graph::GraphError> {
        assert_eq!(tensor_json(&HostTensor::scalar_i64(3)), serde_json::json!(3));
        assert_eq!(tensor_json(&HostTensor::f32(vec![2], vec![0.5, 0.25])?), serde_json::json!([0.5, 0.25]));
        let m = HostTensor::f32(vec![2, 2], vec![1.0, 2.0, 3.0, f32::NAN])?;
        assert_eq!(tensor_json(&m), serde_json::json!([[1.0, 2.0], [3.0, null]]));
        assert_eq!(tensor_json(&HostTensor::f32(vec![0], vec![])?), serde_json::json!([]));
        assert_eq!(tensor_json(&HostTensor::scalar_f32(0.1)).to_string(), "0.1");
        let example = BTreeMap::from([("classes".to_string(), HostTensor::scalar_i64(7))]);
        assert_eq!(json_line(&example).to_string(), r#"{"classes":7}"#);
        Ok(())
    }
}
