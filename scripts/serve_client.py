#!/usr/bin/env python3
"""A TensorFlow Serving REST client against `engine serve`, for the end-to-end test.

Usage: serve_client.py MODEL_URL PREDICTIONS.jsonl IMAGES_IDX_GZ SCALE

MODEL_URL is what `engine serve` prints (http://127.0.0.1:PORT/v1/models/NAME). Checks
the status and metadata endpoints; sends one single-image `instances` request per
prediction line from 16 threads at once and compares every output with `engine
predict`'s; sends a columnar `inputs` request larger than the server's batch size; and checks that bad requests get HTTP 400
(404, 405) with a JSON error naming the problem. Prints a JSON report; exits 1 on failure.
"""
import concurrent.futures
import gzip
import json
import struct
import sys
import urllib.error
import urllib.request

import numpy as np

TOLERANCE = 1e-5


def call(url, body=None, method=None):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    url, predictions, images, scale = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    expected = [json.loads(line) for line in open(predictions)]
    with gzip.open(images) as f:
        data = f.read()
    _, count, rows, cols = struct.unpack(">IIII", data[:16])
    x = np.frombuffer(data, np.uint8, offset=16).reshape(count, rows, cols, 1)[: len(expected)]
    x = (x.astype(np.float32) / np.float32(scale)).tolist()
    failures = []
    report = {}

    status, body = call(url)
    if status != 200 or body["model_version_status"][0]["state"] != "AVAILABLE":
        failures.append(f"status: {status} {body}")
    status, meta = call(url + "/metadata")
    sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    (input_name,) = sig["inputs"]
    report["outputs"] = sorted(sig["outputs"])
    # TensorFlow Serving's dtype names, as its clients read them.
    dtypes = {t["name"]: t["dtype"] for t in [*sig["inputs"].values(), *sig["outputs"].values()]}
    if dtypes.get(input_name) != "DT_FLOAT" or dtypes.get("classes") != "DT_INT64":
        failures.append(f"metadata dtypes: {dtypes}")

    def one(i):
        return i, call(url + ":predict", {"instances": [x[i]]})

    worst = 0.0
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for i, (status, body) in pool.map(one, range(len(expected))):
            if status != 200:
                failures.append(f"example {i}: {status} {body}")
                continue
            (got,) = body["predictions"]
            for k, want in expected[i].items():
                if k == "classes":
                    if got[k] != want:
                        failures.append(f"example {i}: class {got[k]} != {want}")
                else:
                    worst = max(worst, float(np.max(np.abs(np.array(got[k]) - np.array(want)))))
    report["max_abs_diff"] = worst
    if not worst <= TOLERANCE:
        failures.append(f"max |served - predicted| = {worst}")

    # More examples than the server's batch size: run in chunks, answered whole.
    status, body = call(url + ":predict", {"inputs": {input_name: x[:40]}})
    if status != 200 or body["outputs"]["classes"] != [e["classes"] for e in expected[:40]]:
        failures.append(f"columnar: {status} {body}")

    bad = {
        "malformed JSON": (url + ":predict", b"{not json", None, 400, "JSON"),
        "wrong shape": (url + ":predict", {"instances": [[1.0, 2.0]]}, None, 400, "shape"),
        "wrong dtype": (url + ":predict", {"instances": [[[["a"]] * 28] * 28]}, None, 400, "f32"),
        "no examples": (url + ":predict", {"instances": []}, None, 400, "no examples"),
        "unknown input": (url + ":predict", {"inputs": {"nope": [1]}}, None, 400, "nope"),
        "unknown model": (url.rsplit("/", 1)[0] + "/other:predict", {"instances": []}, None, 404, "other"),
        "GET predict": (url + ":predict", None, "GET", 405, "POST"),
    }
    report["errors"] = {}
    for what, (u, body, method, want_status, needle) in bad.items():
        status, reply = call(u, body, method)
        report["errors"][what] = [status, reply.get("error")]
        if status != want_status or needle not in reply.get("error", ""):
            failures.append(f"{what}: {status} {reply}")

    report["requests"] = len(expected)
    report["failures"] = failures
    print(json.dumps(report))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
