"""scikit-learn's precision and recall over `engine predict`'s classes, and ROC AUC over
its probabilities, against the true labels, for the multi-class metric test: prints them as
JSON, keyed as `engine eval` reports them. The AUCs are Keras' (`tf.keras.metrics.AUC`, 200
thresholds, trapezoids), which the engine's follow, written out here with numpy since the
test environment has no TensorFlow: scikit-learn's exact area differs from it by the
thresholds' resolution, by 0.06 on a briefly trained model's narrow probabilities.

usage: sklearn_metrics.py PREDICTIONS.jsonl LABELS-idx1-ubyte.gz N
"""
import gzip
import json
import struct
import sys

import numpy as np
from sklearn.metrics import confusion_matrix, precision_score, recall_score


def keras_auc(labels, scores, num_thresholds=200):
    """tf.keras.metrics.AUC(num_thresholds)'s ROC area: counts above each threshold, in f32."""
    eps = 1e-7
    thresholds = np.array([-eps] + [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)] + [1 + eps],
                          dtype=np.float32)
    labels = np.asarray(labels, dtype=np.float32).reshape(-1, 1)
    scores = np.asarray(scores, dtype=np.float32).reshape(-1, 1)
    above = scores > thresholds[None, :]
    tp = (above * labels).sum(axis=0)
    fp = (above * (1 - labels)).sum(axis=0)
    tpr, fpr = tp / labels.sum(), fp / (1 - labels).sum()
    return float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2))


def main():
    predictions, labels_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(predictions) as f:
        rows = [json.loads(line) for line in f][:n]
    predicted = [row["classes"] for row in rows]
    probabilities = [row["probabilities"] for row in rows]
    with gzip.open(labels_path) as f:
        magic, count = struct.unpack(">II", f.read(8))
        assert magic == 2049, magic
        labels = list(f.read(count))[:n]
    assert len(labels) == len(predicted) == n, (len(labels), len(predicted))
    one_hot = np.eye(10)[labels]
    probabilities = np.array(probabilities)
    report = {
        "precision_macro": precision_score(labels, predicted, average="macro", zero_division=0),
        "precision_micro": precision_score(labels, predicted, average="micro", zero_division=0),
        "recall_macro": recall_score(labels, predicted, average="macro", zero_division=0),
        "precision_class_3": precision_score(labels, predicted, labels=[3], average=None, zero_division=0)[0],
        "recall_class_6": recall_score(labels, predicted, labels=[6], average=None, zero_division=0)[0],
        "auc_macro": float(np.mean([keras_auc(one_hot[:, k], probabilities[:, k]) for k in range(10)])),
        "auc_micro": keras_auc(one_hot, probabilities),
        "auc_class_6": keras_auc(one_hot[:, 6], probabilities[:, 6]),
    }
    out = {k: float(v) for k, v in report.items()}
    out["confusion_matrix"] = confusion_matrix(labels, predicted, labels=list(range(10))).tolist()
    print(json.dumps(out))


main()
