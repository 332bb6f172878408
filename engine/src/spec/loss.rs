//! Losses and metrics by name.

use serde::Deserialize;

/// `loss: SparseCategoricalCrossentropy(from_logits: true)`: Keras' loss names, each with
/// Keras' `from_logits` (false by default: the model's output is probabilities, a softmax or
/// sigmoid whose input the loss then reads, as Keras takes the logits from under it). The
/// engine's earlier names (`SparseSoftmaxCrossEntropy`, ...) read logits, and are accepted
/// with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(from = "LossName")]
pub struct LossSpec {
    pub kind: Loss,
    /// Whether the model's output is logits; otherwise it must end in the loss's softmax
    /// (or sigmoid), whose input is the logits.
    pub from_logits: bool,
}

impl std::fmt::Display for LossSpec {
    /// Keras' name, as a spec writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Loss::MeanSquaredError => write!(f, "MeanSquaredError"),
            kind => write!(f, "{}(from_logits: {})", kind.keras_name(), self.from_logits),
        }
    }
}

/// Named `Loss` for serde, so that errors say "unknown loss".
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Loss")]
enum LossName {
    SparseCategoricalCrossentropy {
        #[serde(default)]
        from_logits: bool,
    },
    CategoricalCrossentropy {
        #[serde(default)]
        from_logits: bool,
    },
    BinaryCrossentropy {
        #[serde(default)]
        from_logits: bool,
    },
    MeanSquaredError,
    SparseSoftmaxCrossEntropy,
    SoftmaxCrossEntropy,
    SigmoidCrossEntropy,
}

impl From<LossName> for LossSpec {
    fn from(name: LossName) -> Self {
        let (kind, from_logits) = match name {
            LossName::SparseCategoricalCrossentropy { from_logits } => (Loss::SparseSoftmaxCrossEntropy, from_logits),
            LossName::CategoricalCrossentropy { from_logits } => (Loss::SoftmaxCrossEntropy, from_logits),
            LossName::BinaryCrossentropy { from_logits } => (Loss::SigmoidCrossEntropy, from_logits),
            LossName::MeanSquaredError => (Loss::MeanSquaredError, true),
            LossName::SparseSoftmaxCrossEntropy => (Loss::SparseSoftmaxCrossEntropy, true),
            LossName::SoftmaxCrossEntropy => (Loss::SoftmaxCrossEntropy, true),
            LossName::SigmoidCrossEntropy => (Loss::SigmoidCrossEntropy, true),
        };
        LossSpec { kind, from_logits }
    }
}

/// The kind of training loss, computed from the model's logits and the labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Integer class labels `[N]` against logits `[N, C]`.
    SparseSoftmaxCrossEntropy,
    /// Probability (one-hot or soft) labels `[N, C]` against logits `[N, C]`.
    SoftmaxCrossEntropy,
    /// Independent binary labels in `[0, 1]` shaped like the logits.
    SigmoidCrossEntropy,
    /// Regression targets shaped like the output.
    MeanSquaredError,
}

impl Loss {
    /// Keras' name for it, as a spec writes it.
    pub fn keras_name(self) -> &'static str {
        match self {
            Loss::SparseSoftmaxCrossEntropy => "SparseCategoricalCrossentropy",
            Loss::SoftmaxCrossEntropy => "CategoricalCrossentropy",
            Loss::SigmoidCrossEntropy => "BinaryCrossentropy",
            Loss::MeanSquaredError => "MeanSquaredError",
        }
    }

    /// Whether the output is a distribution over classes.
    pub fn is_softmax(self) -> bool {
        matches!(self, Loss::SparseSoftmaxCrossEntropy | Loss::SoftmaxCrossEntropy)
    }

    pub fn is_classification(self) -> bool {
        self != Loss::MeanSquaredError
    }
}

/// Evaluation metrics (the estimator computes them from predictions and labels).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Metric {
    Accuracy,
    /// Binary by default; of a multi-class classifier, one class against the rest
    /// (`class_id`) or averaged over classes (`average`).
    Precision {
        #[serde(default)]
        class_id: Option<usize>,
        #[serde(default)]
        average: Option<Average>,
    },
    Recall {
        #[serde(default)]
        class_id: Option<usize>,
        #[serde(default)]
        average: Option<Average>,
    },
    /// Binary by default; of a multi-class classifier, one class against the rest
    /// (`class_id`) or averaged over classes (`average`), as Precision.
    #[serde(rename = "AUC", alias = "Auc")]
    Auc {
        #[serde(default)]
        class_id: Option<usize>,
        #[serde(default)]
        average: Option<Average>,
    },
    MeanSquaredError,
    /// Whether the label is among the `k` largest logits.
    TopKAccuracy {
        k: usize,
    },
    /// The mean of the loss over the evaluation (TensorFlow reports `loss` this way).
    Mean,
    /// Counts of (label's class, predicted class) pairs: written to TensorBoard's Text
    /// dashboard at every evaluation and printed by `engine eval --confusion-matrix`.
    ConfusionMatrix,
}

impl Metric {
    /// The key under which evaluation reports it, as TensorFlow's Estimator does.
    pub fn key(&self) -> String {
        match self {
            Metric::Accuracy => "accuracy".into(),
            Metric::Precision { class_id, average } => per_class_key("precision", *class_id, *average),
            Metric::Recall { class_id, average } => per_class_key("recall", *class_id, *average),
            Metric::Auc { class_id, average } => per_class_key("auc", *class_id, *average),
            Metric::MeanSquaredError => "mean_squared_error".into(),
            Metric::TopKAccuracy { k } => format!("top_{k}_accuracy"),
            Metric::Mean => "mean".into(),
            Metric::ConfusionMatrix => "confusion_matrix".into(),
        }
    }
}

/// How precision and recall average over the classes of a multi-class classifier, as
/// scikit-learn's `average` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Average {
    /// The unweighted mean of the per-class values, over the classes that occur.
    Macro,
    /// From the counts pooled over classes.
    Micro,
}

/// `precision`, `precision_class_3`, `precision_macro`, `recall_micro`, `auc_macro`.
fn per_class_key(name: &str, class_id: Option<usize>, average: Option<Average>) -> String {
    match (class_id, average) {
        (Some(k), _) => format!("{name}_class_{k}"),
        (None, Some(Average::Macro)) => format!("{name}_macro"),
        (None, Some(Average::Micro)) => format!("{name}_micro"),
        (None, None) => name.to_string(),
    }
}
