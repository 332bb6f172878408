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
    Precision,
    Recall,
    #[serde(rename = "AUC", alias = "Auc")]
    Auc,
    MeanSquaredError,
    /// Whether the label is among the `k` largest logits.
    TopKAccuracy {
        k: usize,
    },
    /// The mean of the loss over the evaluation (TensorFlow reports `loss` this way).
    Mean,
}

impl Metric {
    /// The key under which evaluation reports it, as TensorFlow's Estimator does.
    pub fn key(&self) -> String {
        match self {
            Metric::Accuracy => "accuracy".into(),
            Metric::Precision => "precision".into(),
            Metric::Recall => "recall".into(),
            Metric::Auc => "auc".into(),
            Metric::MeanSquaredError => "mean_squared_error".into(),
            Metric::TopKAccuracy { k } => format!("top_{k}_accuracy"),
            Metric::Mean => "mean".into(),
        }
    }
}
