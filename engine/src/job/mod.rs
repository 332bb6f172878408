//! A job spec as an Estimator: the spec's model becomes a model function, its input
//! sections input functions, its run config a RunConfig, its hooks hooks. `engine run`
//! and the Rust API then share one code path.

mod error;
mod hooks;
mod hparams;
mod input_fn;
mod label_vocabulary;
mod model_fn;

pub use error::JobError;
pub use hooks::{hooks_of, optimizer_config};
pub use input_fn::SpecInputFn;
pub use label_vocabulary::{LABEL_VOCABULARY_FILE, label_vocabulary, save_label_vocabulary};
pub use model_fn::SpecModelFn;

use crate::spec::{FieldPath, Spec, SpecError};
use engine_estimator::{
    Estimator, RunConfig,
    input::{InputError, InputSpec},
};
use std::sync::Arc;

/// The Estimator for a spec under `config` (the spec's `run_config` as
/// [`to_estimator`](crate::spec::RunConfig::to_estimator) gives it, with any flags applied).
pub fn estimator(spec: Arc<Spec>, config: RunConfig) -> engine_estimator::Result<Estimator> {
    let seed = config.seed();
    let warm_start = spec.job.warm_start_from.clone();
    let hparams = hparams::hparams(&spec);
    let estimator = Estimator::new(SpecModelFn::new(spec, seed), config)?.with_hparams(hparams);
    Ok(match warm_start {
        Some(ws) => {
            estimator.with_warm_start(engine_estimator::WarmStartSettings::new(&ws.checkpoint, &ws.vars_to_warm_start))
        }
        None => estimator,
    })
}

/// The input spec of `train_input` or `eval_input`, decoded with located errors.
pub fn input_spec(spec: &Spec, field: &str) -> Result<Option<InputSpec>, SpecError> {
    let section = match field {
        "train_input" => Some(&spec.job.train_input),
        _ => spec.job.eval_input.as_ref(),
    };
    let mut input = section.map(|s| spec.decode::<InputSpec>(&s.path)).transpose()?;
    if let Some(input) = &mut input {
        if let Some((column, classes)) = label_vocabulary(spec)? {
            input.set_label_vocabulary(&column, &classes);
        }
        if let crate::spec::Model::Sequential(_) = &spec.job.model {
            input.pack_for_sequential(crate::lower::FEATURES);
        }
    }
    Ok(input)
}

/// `train_input` as an input function, its source opened and checked.
pub fn train_input_fn(spec: &Spec) -> Result<Arc<SpecInputFn>, SpecError> {
    let s = input_spec(spec, "train_input")?.ok_or_else(|| {
        spec.error(FieldPath::root().field("train_input"), crate::spec::ErrorKind::Invalid("missing".into()))
    })?;
    require_labels(spec, &spec.job.train_input.path, &s, "train")?;
    open_input(spec, &spec.job.train_input.path, s, engine_estimator::Mode::Train)
}

/// Training and evaluation need labels; an `Idx` input without them is refused at its
/// `labels` field.
fn require_labels(spec: &Spec, section: &FieldPath, input: &InputSpec, to: &str) -> Result<(), SpecError> {
    if input.lacks_labels() {
        let message = format!("required to {to} (only `engine predict` reads images without labels)");
        return Err(spec.error(section.clone().field("labels"), crate::spec::ErrorKind::Invalid(message)));
    }
    Ok(())
}

/// `eval_input` as an input function, if the spec has one, its source opened and checked.
pub fn eval_input_fn(spec: &Spec) -> Result<Option<Arc<SpecInputFn>>, SpecError> {
    let Some(section) = &spec.job.eval_input else { return Ok(None) };
    let Some(s) = input_spec(spec, "eval_input")? else { return Ok(None) };
    require_labels(spec, &section.path, &s, "evaluate")?;
    Ok(Some(open_input(spec, &section.path, s, engine_estimator::Mode::Eval)?))
}

/// `eval_input` as the input of `engine predict`, which reads no labels.
pub fn predict_input_fn(spec: &Spec) -> Result<Option<Arc<SpecInputFn>>, SpecError> {
    let Some(section) = &spec.job.eval_input else { return Ok(None) };
    let Some(s) = input_spec(spec, "eval_input")? else { return Ok(None) };
    Ok(Some(open_input(spec, &section.path, s, engine_estimator::Mode::Eval)?))
}

/// What a served model receives: the features of `eval_input` (else `train_input`), as
/// `predict` feeds them, after the input's transforms.
pub fn serving_input(spec: &Spec) -> Result<engine_estimator::export::ServingInput, JobError> {
    let input: Arc<SpecInputFn> = match predict_input_fn(spec)? {
        Some(i) => i,
        None => {
            let s = input_spec(spec, "train_input")?.ok_or_else(|| {
                spec.error(FieldPath::root().field("train_input"), crate::spec::ErrorKind::Invalid("missing".into()))
            })?;
            open_input(spec, &spec.job.train_input.path, s, engine_estimator::Mode::Train)?
        }
    };
    let mut serving = engine_estimator::export::ServingInput::from_input_fn(input.as_ref())?;
    match input.spec().serving_preprocessing(input.source_schema()) {
        Some(maps) => serving = serving.with_preprocessing(maps)?,
        None => log::info!(
            "The export takes the features after the input's maps (they reshape or retype features, which \
             only Scale, Normalize and Pack do not): a client applies them before sending"
        ),
    }
    Ok(match label_vocabulary(spec)? {
        Some((_, classes)) => serving.with_class_names(classes),
        None => serving,
    })
}

/// `eval_spec.exporters` as the estimator's exporters, serving the model's features.
pub fn exporters(spec: &Spec) -> Result<Vec<Box<dyn engine_estimator::Exporter>>, JobError> {
    use crate::spec::Exporter as E;
    use engine_estimator::export::{BestExporter, Compare, FinalExporter, LatestExporter};
    let specs = &spec.job.eval_spec.exporters;
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let serving = serving_input(spec)?;
    Ok(specs
        .iter()
        .map(|e| -> Box<dyn engine_estimator::Exporter> {
            match e {
                E::Latest { name, exports_to_keep } => {
                    Box::new(LatestExporter::new(name, serving.clone(), *exports_to_keep))
                }
                E::Best { name, metric, higher_is_better, exports_to_keep } => {
                    let compare = Compare { metric: metric.clone(), higher_is_better: *higher_is_better };
                    Box::new(BestExporter::new(name, serving.clone(), compare, *exports_to_keep))
                }
                E::Final { name } => Box::new(FinalExporter::new(name, serving.clone())),
            }
        })
        .collect())
}

/// Opens an input section's source and checks it against this machine; an error is located
/// at the field it is about (`train_input.prefetch`, `eval_input.images`).
fn open_input(
    spec: &Spec,
    section: &FieldPath,
    input: InputSpec,
    mode: engine_estimator::Mode,
) -> Result<Arc<SpecInputFn>, SpecError> {
    SpecInputFn::open(input, mode, &engine_estimator::Resources::of_this_machine())
        .map(Arc::new)
        .map_err(|e| input_error(spec, section, e))
}

/// An input error as a spec error at `section` (and its field, when the error names one).
pub fn input_error(spec: &Spec, section: &FieldPath, error: InputError) -> SpecError {
    match error {
        InputError::Field { field, source } => {
            let mut path = section.field(field.name);
            if let Some(i) = field.index {
                path = path.index(i);
            }
            spec.error(path, crate::spec::ErrorKind::Invalid(source.to_string()))
        }
        other => spec.error(section.clone(), crate::spec::ErrorKind::Invalid(other.to_string())),
    }
}

/// Lowers the spec's model onto the placeholders `input` provides for `mode` (one pipeline),
/// as training does: a model that does not fit its input (a missing feature, another shape)
/// is refused at `model...` by `engine plan` as by `engine run`.
pub fn check_model_inputs(spec: &Spec, input: &SpecInputFn, mode: crate::lower::Mode) -> Result<(), JobError> {
    use engine_estimator::input::InputContext;
    use engine_graph::{Graph, GraphBuilder, Shape};
    let single = InputContext { num_input_pipelines: 1, input_pipeline_id: 0, num_replicas_in_sync: 1 };
    let schema = engine_estimator::InputFn::dataset(input, mode, &single)
        .and_then(|d| d.schema())
        .map_err(engine_estimator::EstimatorError::from)?;
    let mut graph = Graph::new();
    let mut b = GraphBuilder::new(&mut graph);
    let mut features = std::collections::BTreeMap::new();
    for f in &schema.features {
        let p = b
            .placeholder(&f.name, f.dtype, Shape::batched(&f.shape))
            .map_err(engine_estimator::EstimatorError::from)?;
        features.insert(f.name.clone(), p);
    }
    let labels = match (&schema.label, mode) {
        (Some(l), crate::lower::Mode::Train | crate::lower::Mode::Eval) => Some(
            b.placeholder("labels", l.dtype, Shape::batched(&l.shape))
                .map_err(engine_estimator::EstimatorError::from)?,
        ),
        _ => None,
    };
    let provided = crate::lower::ProvidedInputs::new(features, labels);
    crate::lower::build_model_on(spec, mode, &mut b, spec.job.run_config.to_estimator().seed(), Some(&provided))?;
    Ok(())
}
