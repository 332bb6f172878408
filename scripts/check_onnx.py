#!/usr/bin/env python3
"""Checks an engine export's model.onnx against the engine's own predictions.

Usage: check_onnx.py EXPORT_DIR PREDICTIONS.jsonl IMAGES_IDX_GZ SCALE

Loads model.onnx with onnx's full checker and with onnxruntime, feeds it the first N
images of the IDX file (N = the number of prediction lines, divided by SCALE as the
spec's input does), in batches of different sizes (the batch dimension is dynamic), and
compares every output with `engine predict`'s. Prints a JSON report; exits 1 on a
mismatch.
"""
import gzip
import json
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort

TOLERANCE = 1e-5


def main():
    export, predictions, images, scale = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    model = onnx.load(f"{export}/model.onnx")
    onnx.checker.check_model(model, full_check=True)
    manifest = json.load(open(f"{export}/saved_model.json"))
    expected = [json.loads(line) for line in open(predictions)]
    n = len(expected)
    with gzip.open(images) as f:
        data = f.read()
    _, count, rows, cols = struct.unpack(">IIII", data[:16])
    x = np.frombuffer(data, np.uint8, offset=16).reshape(count, rows, cols, 1)[:n]
    x = x.astype(np.float32) / np.float32(scale)

    session = ort.InferenceSession(f"{export}/model.onnx", providers=["CPUExecutionProvider"])
    (input_spec,) = manifest["signature"]["inputs"]
    names = [o.name for o in session.get_outputs()]
    outputs = {k: [] for k in names}
    # One example, then the rest in uneven batches: the batch dimension must be dynamic.
    bounds = [0, 1] + list(range(1 + 97, n, 97)) + [n]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi <= lo:
            continue
        for k, v in zip(names, session.run(None, {input_spec["name"]: x[lo:hi]})):
            outputs[k].append(v)
    outputs = {k: np.concatenate(v) for k, v in outputs.items()}

    report = {"examples": n, "opset": model.opset_import[0].version, "outputs": {}}
    failures = []
    for k, got in outputs.items():
        want = np.array([e[k] for e in expected])
        if k == "classes":
            differ = int(np.sum(got != want))
            report["outputs"][k] = {"differing": differ}
            if differ:
                failures.append(f"{differ} classes differ")
        else:
            diff = float(np.max(np.abs(got.astype(np.float64) - want)))
            report["outputs"][k] = {"max_abs_diff": diff}
            if not diff <= TOLERANCE:
                failures.append(f"{k}: max |onnx - engine| = {diff} > {TOLERANCE}")
    missing = {o["name"] for o in manifest["signature"]["outputs"]} - set(outputs)
    if missing:
        failures.append(f"outputs missing from the ONNX model: {sorted(missing)}")
    report["failures"] = failures
    print(json.dumps(report))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
