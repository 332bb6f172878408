//! Losses and metrics by name.

use serde::Deserialize;

/// The training loss, computed from the model's output (logits) and the labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
