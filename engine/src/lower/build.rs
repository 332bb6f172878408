//! Building a model's graph: inputs, layers, head.

use super::{LowerError, Mode, functional, head, sequential};
use crate::spec::{ErrorKind, FieldPath, Model, Spec, SpecError};
use engine_graph::{GraphBuilder, GraphError, Outlet};
use std::collections::{BTreeMap, HashMap};

/// What [`build_model`] wired, by meaning. The same outlets are recorded in the graph's
/// roles (`inputs`, `loss`, `predictions`), which is what passes and the runtime read.
#[derive(Debug, Clone)]
pub struct ModelGraph {
    pub mode: Mode,
    /// Feature placeholders by feed name (`x`, or a functional model's input names).
    pub features: BTreeMap<String, Outlet>,
    /// The `labels` placeholder (not in predict mode).
    pub labels: Option<Outlet>,
    /// The logits: the model's output, or what its final softmax (sigmoid) reads when the
    /// loss takes probabilities.
    pub logits: Outlet,
    /// `logits`, and `probabilities` and `classes` for classification (`predictions` for regression).
    pub predictions: BTreeMap<String, Outlet>,
    /// The scalar loss: batch mean plus regularization (not in predict mode).
    pub loss: Option<Outlet>,
    /// Every layer's output, in the order built.
    pub layers: Vec<LayerOutput>,
}

/// One layer's output, named as its variable scope (`conv2d`, `dense_1`, or a functional
/// node's name), with the layer's place in the spec.
#[derive(Debug, Clone)]
pub struct LayerOutput {
    pub name: String,
    /// The layer's type as a spec writes it (`Conv2D`).
    pub kind: &'static str,
    pub path: FieldPath,
    pub output: Outlet,
}

/// Wires the spec's model into `b`: placeholders, layers, loss and predictions, and sets
/// the graph's roles. `seed` is the job's random seed (dropout masks derive from it;
/// initial values are the runtime's, derived from the seed and each variable's name).
pub fn build_model(spec: &Spec, mode: Mode, b: &mut GraphBuilder<'_>, seed: u64) -> Result<ModelGraph, LowerError> {
    build_model_on(spec, mode, b, seed, None)
}

/// Inputs made by someone else (the Estimator makes placeholders from the input
/// pipeline's schema and hands them to the model function).
#[derive(Debug, Clone, Default)]
pub struct ProvidedInputs {
    pub features: BTreeMap<String, Outlet>,
    pub labels: Option<Outlet>,
    /// Each example's weight in the loss (the input's `weight` column), when it has one.
    pub weights: Option<Outlet>,
}

impl ProvidedInputs {
    /// The pipeline's features, with the examples' weights (`sample_weight`) taken out of
    /// the model's inputs.
    pub fn new(mut features: BTreeMap<String, Outlet>, labels: Option<Outlet>) -> Self {
        let weights = features.remove(engine_estimator::input::SAMPLE_WEIGHT);
        ProvidedInputs { features, labels, weights }
    }
}

/// [`build_model`] on inputs that already exist: the model's inputs are bound by name to
/// `provided.features` (a single-input model binds to a single feature whatever its name)
/// and checked against the spec's shapes.
pub fn build_model_on(
    spec: &Spec,
    mode: Mode,
    b: &mut GraphBuilder<'_>,
    seed: u64,
    provided: Option<&ProvidedInputs>,
) -> Result<ModelGraph, LowerError> {
    let mut cx = Lowering {
        spec,
        mode,
        b,
        seed,
        counters: HashMap::new(),
        regularizers: Vec::new(),
        layers: Vec::new(),
        provided,
    };
    let (features, logits, output_path) = match &spec.job.model {
        Model::Sequential(s) => sequential::build(&mut cx, s)?,
        Model::Functional(f) => functional::build(&mut cx, f)?,
    };
    let head = head::build(&mut cx, logits, &output_path)?;
    let roles = &mut cx.b.graph_mut().roles;
    roles.inputs.extend(features.iter().map(|(k, v)| (k.clone(), *v)));
    if let Some(labels) = head.labels {
        roles.inputs.insert(head::LABELS.to_string(), labels);
    }
    roles.loss = head.loss;
    roles.predictions.extend(head.predictions.iter().map(|(k, v)| (k.clone(), *v)));
    if let Some(reg) = head.regularization {
        roles.fetches.insert("regularization_loss".to_string(), reg);
    }
    Ok(ModelGraph {
        mode,
        features,
        labels: head.labels,
        logits: head.logits,
        predictions: head.predictions,
        loss: head.loss,
        layers: cx.layers,
    })
}

/// State while lowering one model.
pub(super) struct Lowering<'s, 'b, 'g> {
    pub spec: &'s Spec,
    pub mode: Mode,
    pub b: &'b mut GraphBuilder<'g>,
    pub seed: u64,
    /// Keras' per-kind layer counters (`dense`, `dense_1`): counted per build, so the
    /// names are the same in training and evaluation graphs whatever nodes a mode omits.
    counters: HashMap<&'static str, usize>,
    /// `(factor, variable)` for every L2 penalty.
    pub regularizers: Vec<(f32, Outlet)>,
    pub layers: Vec<LayerOutput>,
    pub provided: Option<&'s ProvidedInputs>,
}

impl Lowering<'_, '_, '_> {
    /// The model input `name` (of `count` inputs): the provided placeholder, checked
    /// against the spec's shape, or a new placeholder.
    pub fn input(
        &mut self,
        name: &str,
        count: usize,
        dtype: engine_graph::DType,
        shape: engine_graph::Shape,
        at: &FieldPath,
    ) -> Result<Outlet, LowerError> {
        let Some(p) = self.provided else {
            return self.b.placeholder(name, dtype, shape).map_err(|e| self.graph_error(at, e));
        };
        let found =
            p.features.get(name).copied().or_else(|| {
                (count == 1 && p.features.len() == 1).then(|| p.features.values().next().copied()).flatten()
            });
        let names: Vec<&str> = p.features.keys().map(String::as_str).collect();
        let x = found.ok_or_else(|| {
            self.shape_error(at, format!("the input pipeline provides features {names:?}, not '{name}'"))
        })?;
        let fact = self.b.fact(x).map_err(|e| self.graph_error(at, e))?.clone();
        if fact.dtype != dtype || fact.shape != shape {
            return Err(self.shape_error(
                at,
                format!("the model expects input '{name}' as {dtype}{shape}, the input pipeline provides {fact}"),
            ));
        }
        Ok(x)
    }

    /// The labels: the provided placeholder (checked) or a new one.
    pub fn labels(
        &mut self,
        dtype: engine_graph::DType,
        shape: engine_graph::Shape,
        at: &FieldPath,
    ) -> Result<Outlet, LowerError> {
        match self.provided {
            None => self.b.placeholder(super::head::LABELS, dtype, shape).map_err(|e| self.graph_error(at, e)),
            Some(p) => {
                let l = p.labels.ok_or_else(|| self.shape_error(at, "the input pipeline provides no labels"))?;
                let fact = self.b.fact(l).map_err(|e| self.graph_error(at, e))?.clone();
                if fact.dtype != dtype || fact.shape != shape {
                    return Err(self.shape_error(
                        at,
                        format!("the loss needs labels {dtype}{shape}, the input pipeline provides {fact}"),
                    ));
                }
                Ok(l)
            }
        }
    }

    /// The next Keras-style name for a kind of layer, unused in the graph.
    pub fn layer_name(&mut self, base: &'static str) -> String {
        let n = self.counters.entry(base).or_insert(0);
        let candidate = if *n == 0 { base.to_string() } else { format!("{base}_{n}") };
        *n += 1;
        self.b.unique_scope(&candidate)
    }

    pub fn shape_error(&self, path: &FieldPath, message: impl Into<String>) -> LowerError {
        LowerError::Spec(self.spec.error(path.clone(), ErrorKind::Shape(message.into())))
    }

    /// A graph error while wiring the layer at `path`: the spec asked for it, so it is
    /// reported there.
    pub fn graph_error(&self, path: &FieldPath, e: GraphError) -> LowerError {
        let kind = match e {
            GraphError::Shape { .. } => ErrorKind::Shape(e.to_string()),
            other => ErrorKind::Invalid(other.to_string()),
        };
        LowerError::Spec(self.spec.error(path.clone(), kind))
    }

    pub fn spec_error(&self, path: &FieldPath, kind: ErrorKind) -> SpecError {
        self.spec.error(path.clone(), kind)
    }

    pub fn shape_of(&self, x: Outlet) -> Result<engine_graph::Shape, LowerError> {
        self.b
            .fact(x)
            .map(|f| f.shape.clone())
            .map_err(|e| LowerError::Graph { stage: "building the model", source: e })
    }
}
