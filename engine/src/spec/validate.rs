//! Checks that need more than types: value ranges, names that refer to each other,
//! settings that exclude each other. Shapes are checked later, when the model is lowered.

use super::{
    ErrorKind, FieldPath, Functional, Job, Layer, LearningRateSpec, Loss, MAX_ELASTIC_WORKERS, MAX_MERGE_INPUTS,
    MAX_SHARDS, Metric, Model, OptimizerSpec, Regularizer, Sequential, Spec, SpecError, VariablePartitioner,
};
use engine_estimator::strategy::StrategyKind;
use engine_graph::{Initializer, optimizer::LearningRate};
use std::collections::BTreeSet;

/// Window sizes and strides beyond this are typos; the bound keeps padding arithmetic exact.
const MAX_WINDOW: usize = 1 << 20;
/// Attention heads per layer (each is a batch of products).
const MAX_HEADS: usize = 1024;

/// Names the graph uses itself; a functional input or node may not take them.
pub const RESERVED_NAMES: &[&str] = &["labels", "global_step", "x", "head", "loss"];

pub(super) fn validate(spec: &Spec) -> Result<(), SpecError> {
    Checker { spec }.job(&spec.job)
}

struct Checker<'s> {
    spec: &'s Spec,
}

type Check = Result<(), SpecError>;

fn root() -> FieldPath {
    FieldPath::root()
}

impl Checker<'_> {
    fn fail(&self, path: FieldPath, message: impl Into<String>) -> SpecError {
        self.spec.error(path, ErrorKind::Invalid(message.into()))
    }

    fn require(&self, ok: bool, path: FieldPath, message: impl Into<String>) -> Check {
        if ok { Ok(()) } else { Err(self.fail(path, message)) }
    }

    fn job(&self, job: &Job) -> Check {
        match &job.model {
            Model::Sequential(s) => self.sequential(s)?,
            Model::Functional(f) => self.functional(f)?,
        }
        self.metrics(job.loss.kind, &job.metrics)?;
        self.label_smoothing(job)?;
        self.class_weight(job)?;
        self.epochs(job)?;
        self.optimizer(&job.optimizer)?;
        self.run_config(job)?;
        self.warm_start(job)
    }

    fn warm_start(&self, job: &Job) -> Check {
        let Some(ws) = &job.warm_start_from else { return Ok(()) };
        let at = root().field("warm_start_from");
        self.require(!ws.checkpoint.trim().is_empty(), at.field("checkpoint"), "must not be empty")?;
        match regex::Regex::new(&ws.vars_to_warm_start) {
            Ok(_) => Ok(()),
            Err(e) => {
                // The regex crate's message spans lines (the pattern, a caret, the cause).
                let cause = e.to_string().lines().last().unwrap_or_default().trim().to_string();
                Err(self.fail(at.field("vars_to_warm_start"), format!("is not a regular expression ({cause})")))
            }
        }
    }

    fn positive_shape(&self, shape: &[usize], path: FieldPath) -> Check {
        self.require(!shape.is_empty(), path.clone(), "an input shape needs at least one dimension")?;
        for (i, &d) in shape.iter().enumerate() {
            self.require(d > 0, path.index(i), "dimensions must be positive")?;
        }
        Ok(())
    }

    fn sequential(&self, s: &Sequential) -> Check {
        let path = root().field("model");
        self.positive_shape(&s.input_shape, path.field("input_shape"))?;
        self.require(!s.layers.is_empty(), path.field("layers"), "a Sequential model needs at least one layer")?;
        for (i, layer) in s.layers.iter().enumerate() {
            let at = path.field("layers").index(i);
            if *layer.inputs().start() > 1 {
                return Err(self.fail(
                    at,
                    format!("`{}` merges several inputs, so it needs a Functional model", layer.spec_name()),
                ));
            }
            self.layer(layer, at)?;
        }
        Ok(())
    }

    fn functional(&self, f: &Functional) -> Check {
        let path = root().field("model");
        self.require(!f.inputs.is_empty(), path.field("inputs"), "a Functional model needs at least one input")?;
        let mut known: Vec<&str> = Vec::new();
        for (name, shape) in &f.inputs {
            let at = path.field("inputs").key(name);
            self.name(name, &known, at.clone())?;
            self.positive_shape(shape, at)?;
            known.push(name);
        }
        self.require(!f.nodes.is_empty(), path.field("nodes"), "a Functional model needs at least one node")?;
        for (i, node) in f.nodes.iter().enumerate() {
            let at = path.field("nodes").index(i);
            self.name(node.name(), &known, at.elem(0))?;
            let layer = node.layer();
            self.layer(layer, at.elem(1))?;
            let n = node.inputs().len();
            let range = layer.inputs();
            let (lo, hi) = (*range.start(), *range.end());
            let takes = match (lo, hi) {
                (1, 1) => "exactly one input".to_string(),
                (lo, MAX_MERGE_INPUTS) => format!("at least {lo} and at most {MAX_MERGE_INPUTS} inputs"),
                (lo, hi) => format!("{lo} to {hi} inputs"),
            };
            self.require(range.contains(&n), at.elem(2), format!("`{}` takes {takes}, found {n}", layer.spec_name()))?;
            for (j, input) in node.inputs().iter().enumerate() {
                self.reference(input, &known, at.elem(2).index(j), &format!("input of node `{}`", node.name()))?;
            }
            known.push(node.name());
        }
        let outputs = path.field("outputs");
        self.require(
            f.outputs.len() == 1,
            outputs.clone(),
            format!("exactly one output (the logits) is supported, found {}", f.outputs.len()),
        )?;
        for (i, out) in f.outputs.iter().enumerate() {
            self.reference(out, &known, outputs.index(i), "output")?;
        }
        Ok(())
    }

    /// A new input or node name: usable as a variable scope, not taken.
    fn name(&self, name: &str, known: &[&str], at: FieldPath) -> Check {
        let ok_chars = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        self.require(ok_chars, at.clone(), format!("`{name}` is not a valid name (letters, digits, `_`, `-`, `.`)"))?;
        self.require(
            !RESERVED_NAMES.contains(&name),
            at.clone(),
            format!("`{name}` is reserved (reserved: {})", RESERVED_NAMES.join(", ")),
        )?;
        self.require(!known.contains(&name), at, format!("the name `{name}` is used twice"))
    }

    /// A reference to an input or an earlier node.
    fn reference(&self, name: &str, known: &[&str], at: FieldPath, what: &str) -> Check {
        if known.contains(&name) {
            return Ok(());
        }
        let what = format!("{what} (an input or an earlier node)");
        Err(self.spec.error(
            at,
            ErrorKind::UnknownName {
                what,
                name: name.to_string(),
                expected: known.iter().map(|s| s.to_string()).collect(),
            },
        ))
    }

    fn layer(&self, layer: &Layer, at: FieldPath) -> Check {
        match layer {
            Layer::Dense(d) => {
                self.require(d.units > 0, at.field("units"), "must be positive")?;
                self.initializer(&d.kernel_initializer, at.field("kernel_initializer"))?;
                self.initializer(&d.bias_initializer, at.field("bias_initializer"))?;
                self.regularizer(d.kernel_regularizer, at.field("kernel_regularizer"))?;
                self.regularizer(d.bias_regularizer, at.field("bias_regularizer"))
            }
            Layer::Conv2d(c) => {
                self.require(c.filters > 0, at.field("filters"), "must be positive")?;
                self.size(c.kernel_size.0, at.field("kernel_size"))?;
                self.size(c.strides.0, at.field("strides"))?;
                self.size(c.dilation_rate.0, at.field("dilation_rate"))?;
                self.require(
                    c.dilation_rate.0 == [1, 1] || c.strides.0 == [1, 1],
                    at.field("dilation_rate"),
                    "cannot be combined with strides other than 1 (as in Keras)",
                )?;
                self.require(
                    c.groups >= 1 && c.filters % c.groups == 0,
                    at.field("groups"),
                    format!("must be positive and divide filters ({})", c.filters),
                )?;
                self.initializer(&c.kernel_initializer, at.field("kernel_initializer"))?;
                self.initializer(&c.bias_initializer, at.field("bias_initializer"))?;
                self.regularizer(c.kernel_regularizer, at.field("kernel_regularizer"))?;
                self.regularizer(c.bias_regularizer, at.field("bias_regularizer"))
            }
            Layer::MaxPool2d(p) | Layer::AvgPool2d(p) => {
                self.size(p.pool_size.0, at.field("pool_size"))?;
                self.size(p.strides().0, at.field("strides"))
            }
            Layer::Reshape(r) => {
                let at = at.field("target_shape");
                self.require(!r.target_shape.is_empty(), at.clone(), "needs at least one dimension")?;
                let holes = r.target_shape.iter().filter(|&&d| d == -1).count();
                self.require(holes <= 1, at.clone(), "at most one dimension may be -1")?;
                for (i, &d) in r.target_shape.iter().enumerate() {
                    self.require(d > 0 || d == -1, at.index(i), "dimensions must be positive (or one -1)")?;
                }
                Ok(())
            }
            Layer::Dropout(d) => self.require(
                (0.0..1.0).contains(&d.rate),
                at.field("rate"),
                format!("must be in [0, 1), found {}", d.rate),
            ),
            Layer::Concatenate(c) => self.require(
                c.axis != 0,
                at.field("axis"),
                "axis 0 is the batch axis; examples cannot be concatenated with each other",
            ),
            Layer::BatchNormalization(n) => {
                self.require(
                    (0.0..=1.0).contains(&n.momentum),
                    at.field("momentum"),
                    format!("must be in [0, 1], found {}", n.momentum),
                )?;
                self.epsilon(n.epsilon, at.field("epsilon"))
            }
            Layer::LayerNormalization(n) => self.epsilon(n.epsilon, at.field("epsilon")),
            Layer::ZeroPadding2D(z) => self.require(
                z.padding.0.iter().all(|&p| p <= MAX_WINDOW),
                at.field("padding"),
                format!("must be at most {MAX_WINDOW}"),
            ),
            Layer::MultiHeadAttention(m) => {
                self.require(
                    (1..=MAX_HEADS).contains(&m.num_heads),
                    at.field("num_heads"),
                    format!("must be between 1 and {MAX_HEADS}"),
                )?;
                self.require(m.key_dim > 0, at.field("key_dim"), "must be positive")?;
                self.require(m.value_dim != Some(0), at.field("value_dim"), "must be positive")?;
                self.require(m.output_shape != Some(0), at.field("output_shape"), "must be positive")?;
                self.require(
                    (0.0..1.0).contains(&m.dropout),
                    at.field("dropout"),
                    format!("must be in [0, 1), found {}", m.dropout),
                )?;
                self.initializer(&m.kernel_initializer, at.field("kernel_initializer"))?;
                self.initializer(&m.bias_initializer, at.field("bias_initializer"))
            }
            Layer::AddPositionEmbedding(p) => self.initializer(&p.initializer, at.field("initializer")),
            Layer::Embedding(e) => {
                self.require(e.input_dim > 0, at.field("input_dim"), "must be positive")?;
                self.require(e.output_dim > 0, at.field("output_dim"), "must be positive")?;
                self.initializer(&e.embeddings_initializer, at.field("embeddings_initializer"))
            }
            Layer::Flatten
            | Layer::Activation(_)
            | Layer::Add
            | Layer::Multiply
            | Layer::GlobalAveragePooling2D
            | Layer::GlobalAveragePooling1D => Ok(()),
        }
    }

    fn epsilon(&self, e: f32, at: FieldPath) -> Check {
        self.require(e.is_finite() && e > 0.0, at, format!("must be positive, found {e}"))
    }

    fn size(&self, s: [usize; 2], at: FieldPath) -> Check {
        self.require(s[0] > 0 && s[1] > 0, at.clone(), format!("sizes must be positive, found ({}, {})", s[0], s[1]))?;
        self.require(
            s[0] <= MAX_WINDOW && s[1] <= MAX_WINDOW,
            at,
            format!("sizes must be at most {MAX_WINDOW}, found ({}, {})", s[0], s[1]),
        )
    }

    fn initializer(&self, init: &Initializer, at: FieldPath) -> Check {
        match *init {
            Initializer::RandomNormal { stddev, .. } | Initializer::TruncatedNormal { stddev, .. } => {
                self.require(stddev > 0.0, at.field("stddev"), "must be positive")
            }
            Initializer::RandomUniform { min, max } => {
                self.require(min < max, at.field("max"), format!("must be greater than min ({min})"))
            }
            _ => Ok(()),
        }
    }

    fn regularizer(&self, r: Option<Regularizer>, at: FieldPath) -> Check {
        match r {
            Some(Regularizer::L2(f)) => {
                self.require(f.is_finite() && f >= 0.0, at, format!("the factor must be >= 0, found {f}"))
            }
            None => Ok(()),
        }
    }

    fn metrics(&self, loss: Loss, metrics: &[Metric]) -> Check {
        let mut seen = BTreeSet::new();
        for (i, m) in metrics.iter().enumerate() {
            let at = root().field("metrics").index(i);
            self.require(seen.insert(m.key()), at.clone(), format!("`{}` is listed twice", m.key()))?;
            let fits = match m {
                Metric::Accuracy | Metric::Precision { .. } | Metric::Recall { .. } | Metric::Auc { .. } => {
                    loss.is_classification()
                }
                Metric::TopKAccuracy { k } => {
                    self.require(*k > 0, at.field("k"), "must be positive")?;
                    loss.is_softmax()
                }
                Metric::ConfusionMatrix => loss.is_softmax(),
                Metric::MeanSquaredError | Metric::Mean => true,
            };
            self.require(fits, at, format!("`{}` does not apply to the loss {}", m.key(), loss.keras_name()))?;
        }
        Ok(())
    }

    fn label_smoothing(&self, job: &Job) -> Check {
        let s = job.label_smoothing;
        let at = root().field("label_smoothing");
        self.require((0.0..1.0).contains(&s), at.clone(), format!("must be in [0, 1), found {s}"))?;
        self.require(
            s == 0.0 || job.loss.kind.is_classification(),
            at,
            format!("applies to cross-entropy losses, not {}", job.loss),
        )
    }

    fn epochs(&self, job: &Job) -> Check {
        let at = root().field("train_spec").field("epochs");
        self.require(job.train_spec.epochs != Some(0), at, "must be at least 1")
    }

    /// The classes themselves are checked against the model's output when it is lowered.
    fn class_weight(&self, job: &Job) -> Check {
        let weights = &job.train_spec.class_weight;
        let at = root().field("train_spec").field("class_weight");
        if weights.is_empty() {
            return Ok(());
        }
        self.require(
            job.loss.kind.is_softmax(),
            at.clone(),
            format!(
                "weights the examples of a classifier by their class: it needs SparseCategoricalCrossentropy or \
                 CategoricalCrossentropy, not {}",
                job.loss
            ),
        )?;
        for (class, w) in weights {
            self.require(
                w.is_finite() && *w >= 0.0,
                at.clone(),
                format!("the weight of class {class} must be finite and >= 0, found {w}"),
            )?;
        }
        Ok(())
    }

    fn optimizer(&self, o: &OptimizerSpec) -> Check {
        let at = root().field("optimizer");
        let unit = |x: f32| (0.0..1.0).contains(&x);
        match o {
            OptimizerSpec::Sgd(s) => {
                self.require(s.momentum >= 0.0, at.field("momentum"), "must be >= 0")?;
            }
            OptimizerSpec::Adam(a) => {
                self.require(unit(a.beta1), at.field("beta1"), "must be in [0, 1)")?;
                self.require(unit(a.beta2), at.field("beta2"), "must be in [0, 1)")?;
                self.require(a.epsilon >= 0.0, at.field("epsilon"), "must be >= 0")?;
            }
            OptimizerSpec::AdamW(a) => {
                self.require(unit(a.beta1), at.field("beta1"), "must be in [0, 1)")?;
                self.require(unit(a.beta2), at.field("beta2"), "must be in [0, 1)")?;
                self.require(a.epsilon >= 0.0, at.field("epsilon"), "must be >= 0")?;
                self.require(
                    a.weight_decay.is_finite() && a.weight_decay >= 0.0,
                    at.field("weight_decay"),
                    "must be >= 0",
                )?;
            }
            OptimizerSpec::RmsProp(r) => {
                self.require(unit(r.decay), at.field("decay"), "must be in [0, 1)")?;
                self.require(r.momentum >= 0.0, at.field("momentum"), "must be >= 0")?;
                self.require(r.epsilon >= 0.0, at.field("epsilon"), "must be >= 0")?;
            }
            OptimizerSpec::Adagrad(a) => {
                self.require(a.initial_accumulator >= 0.0, at.field("initial_accumulator"), "must be >= 0")?;
                self.require(a.epsilon >= 0.0, at.field("epsilon"), "must be >= 0")?;
                self.require(
                    a.initial_accumulator > 0.0 || a.epsilon > 0.0,
                    at.field("initial_accumulator"),
                    "must be positive when epsilon is 0 (the first step would divide by zero)",
                )?;
            }
        }
        if let Some(c) = o.clip_global_norm() {
            self.require(c.is_finite() && c > 0.0, at.field("clip_global_norm"), "must be positive")?;
        }
        self.learning_rate(&LearningRateSpec(o.learning_rate().clone()), at.field("learning_rate"))
    }

    fn learning_rate(&self, lr: &LearningRateSpec, at: FieldPath) -> Check {
        let positive = |x: f32| x.is_finite() && x > 0.0;
        match &lr.0 {
            LearningRate::Constant(x) => self.require(positive(*x), at, format!("must be positive, found {x}")),
            LearningRate::ExponentialDecay { initial, decay_steps, decay_rate, .. } => {
                self.require(positive(*initial), at.field("initial"), "must be positive")?;
                self.require(*decay_steps > 0, at.field("decay_steps"), "must be positive")?;
                self.require(positive(*decay_rate), at.field("decay_rate"), "must be positive")
            }
            LearningRate::PiecewiseConstant { boundaries, values } => {
                self.require(
                    values.len() == boundaries.len() + 1,
                    at.field("values"),
                    format!("needs one more value than boundaries ({}), found {}", boundaries.len(), values.len()),
                )?;
                for (i, w) in boundaries.windows(2).enumerate() {
                    self.require(w[0] < w[1], at.field("boundaries").index(i + 1), "boundaries must increase")?;
                }
                for (i, v) in values.iter().enumerate() {
                    self.require(v.is_finite() && *v >= 0.0, at.field("values").index(i), "must be >= 0")?;
                }
                Ok(())
            }
            LearningRate::CosineDecay { initial, decay_steps, alpha } => {
                self.require(positive(*initial), at.field("initial"), "must be positive")?;
                self.require(*decay_steps > 0, at.field("decay_steps"), "must be positive")?;
                self.require((0.0..=1.0).contains(alpha), at.field("alpha"), "must be in [0, 1]")
            }
            LearningRate::LinearWarmup { steps, initial, then } => {
                self.require(*steps > 0, at.field("steps"), "must be positive")?;
                self.require(initial.is_finite() && *initial >= 0.0, at.field("initial"), "must be >= 0")?;
                self.require(
                    !matches!(**then, LearningRate::LinearWarmup { .. }),
                    at.field("then"),
                    "a warmup cannot follow a warmup",
                )?;
                self.learning_rate(&LearningRateSpec((**then).clone()), at.field("then"))
            }
            // Not written in specs: the job wraps the spec's rate when a hook reduces it.
            LearningRate::ReducedOnPlateau { then, .. } => self.learning_rate(&LearningRateSpec((**then).clone()), at),
        }
    }

    fn run_config(&self, job: &Job) -> Check {
        let rc = &job.run_config;
        let at = root().field("run_config");
        self.require(!rc.model_dir.trim().is_empty(), at.field("model_dir"), "must not be empty")?;
        if rc.save_checkpoints_steps.is_some() && rc.save_checkpoints_secs.is_some() {
            return Err(self.fail(
                at.field("save_checkpoints_secs"),
                "cannot be set together with save_checkpoints_steps (TensorFlow refuses this too); set one",
            ));
        }
        let positive = |v: Option<u64>, name: &str| self.require(v != Some(0), at.field(name), "must be positive");
        positive(rc.save_checkpoints_steps, "save_checkpoints_steps")?;
        positive(rc.save_checkpoints_secs, "save_checkpoints_secs")?;
        positive(Some(rc.log_step_count_steps), "log_step_count_steps")?;
        self.require(
            rc.keep_checkpoint_every_n_hours > 0.0,
            at.field("keep_checkpoint_every_n_hours"),
            "must be positive",
        )?;
        self.require(
            job.train_spec.max_steps != Some(0),
            root().field("train_spec").field("max_steps"),
            "must be positive",
        )?;
        for (value, name) in [(rc.min_workers, "min_workers"), (rc.max_workers, "max_workers")] {
            self.require(
                value.is_none_or(|n| (1..=MAX_ELASTIC_WORKERS).contains(&n)),
                at.field(name),
                format!("must be from 1 to {MAX_ELASTIC_WORKERS}"),
            )?;
        }
        if let (Some(min), Some(max)) = (rc.min_workers, rc.max_workers) {
            self.require(min <= max, at.field("min_workers"), format!("must be at most max_workers ({max})"))?;
        }
        if rc.min_workers.is_some() || rc.max_workers.is_some() {
            let field = if rc.min_workers.is_some() { "min_workers" } else { "max_workers" };
            self.require(
                matches!(rc.train_distribute, None | Some(StrategyKind::MultiWorker)),
                at.field(field),
                "is for train_distribute: \"multi_worker\" (an elastic job re-forms its workers)",
            )?;
        }
        if let Some(p) = &rc.variable_partitioner {
            let at = at.field("variable_partitioner");
            let shards = match p {
                VariablePartitioner::MinSize { min_shard_bytes, max_shards } => {
                    self.require(*min_shard_bytes > 0, at.field("min_shard_bytes"), "must be positive")?;
                    (*max_shards, at.field("max_shards"))
                }
                VariablePartitioner::FixedShards(n) => (*n, at),
            };
            self.require((1..=MAX_SHARDS).contains(&shards.0), shards.1, format!("must be from 1 to {MAX_SHARDS}"))?;
        }
        let eval = root().field("eval_spec");
        self.require(job.eval_spec.steps != Some(0), eval.field("steps"), "must be positive")?;
        self.require(job.eval_spec.every_n_steps != Some(0), eval.field("every_n_steps"), "must be positive")?;
        self.require(
            job.eval_spec.name.as_deref().is_none_or(|n| !n.is_empty()),
            eval.field("name"),
            "must not be empty",
        )?;
        let mut names = std::collections::BTreeSet::new();
        for (i, e) in job.eval_spec.exporters.iter().enumerate() {
            let at = eval.clone().field("exporters").index(i);
            let name = e.name();
            self.require(
                !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                    && name != "."
                    && name != "..",
                at.clone().field("name"),
                "must be a directory name: letters, digits, '_', '-' and '.'",
            )?;
            self.require(names.insert(name), at.clone().field("name"), format!("'{name}' names another exporter too"))?;
            if let super::Exporter::Best { metric, .. } = e {
                let mut known: Vec<String> = vec!["loss".into()];
                known.extend(job.metrics.iter().map(|m| m.key()));
                self.require(
                    known.contains(metric),
                    at.clone().field("metric"),
                    format!("'{metric}' is not evaluated; the evaluation reports: {}", known.join(", ")),
                )?;
            }
            if let super::Exporter::Latest { exports_to_keep: Some(n), .. }
            | super::Exporter::Best { exports_to_keep: Some(n), .. } = e
            {
                self.require(
                    (1..=super::MAX_EXPORTS_TO_KEEP).contains(n),
                    at.field("exports_to_keep"),
                    format!("must be from 1 to {} (None keeps every export)", super::MAX_EXPORTS_TO_KEEP),
                )?;
            }
        }
        Ok(())
    }
}
