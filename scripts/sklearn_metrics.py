"""scikit-learn's precision and recall over `engine predict`'s classes and the true labels,
for the multi-class metric test: prints them as JSON, keyed as `engine eval` reports them.

usage: sklearn_metrics.py PREDICTIONS.jsonl LABELS-idx1-ubyte.gz N
"""
import gzip
import json
import struct
import sys

from sklearn.metrics import precision_score, recall_score


def main():
    predictions, labels_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(predictions) as f:
        predicted = [json.loads(line)["classes"] for line in f][:n]
    with gzip.open(labels_path) as f:
        magic, count = struct.unpack(">II", f.read(8))
        assert magic == 2049, magic
        labels = list(f.read(count))[:n]
    assert len(labels) == len(predicted) == n, (len(labels), len(predicted))
    report = {
        "precision_macro": precision_score(labels, predicted, average="macro", zero_division=0),
        "precision_micro": precision_score(labels, predicted, average="micro", zero_division=0),
        "recall_macro": recall_score(labels, predicted, average="macro", zero_division=0),
        "precision_class_3": precision_score(labels, predicted, labels=[3], average=None, zero_division=0)[0],
        "recall_class_6": recall_score(labels, predicted, labels=[6], average=None, zero_division=0)[0],
    }
    print(json.dumps({k: float(v) for k, v in report.items()}))


main()
