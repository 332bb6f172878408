#!/usr/bin/env python3
"""Serving throughput and latency: `engine serve` (TensorFlow Serving's REST API, with
server-side batching) against onnxruntime's Python InferenceSession on the same export's
model.onnx, interleaved round by round on this machine.

    .venv/bin/python bench/compare_serve.py --export DIR [--clients 8] [--requests 2000]

Each round runs a bounded loop: CLIENTS threads send REQUESTS single-image predictions
in all (the first TEST images of Fashion-MNIST, scaled to [0, 1]), each waiting for its
answer before sending the next. For the engine a request is an HTTP POST of
`{"instances": [image]}` on a kept-alive connection to 127.0.0.1 (the JSON bodies are
encoded before timing); for onnxruntime it is `session.run` on a (1, 28, 28, 1) array in
the same process (no network, no JSON). Reports requests/s and p50/p99 latency per side
and round, and the medians; writes bench/results/serve_compare.json.
"""
import argparse
import gzip
import http.client
import json
import os
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def images(n):
    with gzip.open(IMAGES) as f:
        data = f.read()
    _, count, rows, cols = struct.unpack(">IIII", data[:16])
    x = np.frombuffer(data, np.uint8, offset=16).reshape(count, rows, cols, 1)[:n]
    return x.astype(np.float32) / np.float32(255.0)


def load(clients, requests, one):
    """Runs `one(worker, i)` REQUESTS times over CLIENTS threads; returns (req/s, latencies)."""
    latencies = [[] for _ in range(clients)]
    per = requests // clients

    def worker(w):
        for i in range(per):
            t = time.perf_counter()
            one(w, i)
            latencies[w].append(time.perf_counter() - t)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    flat = np.array([x for l in latencies for x in l])
    return {
        "requests_per_s": len(flat) / elapsed,
        "p50_ms": float(np.percentile(flat, 50) * 1e3),
        "p99_ms": float(np.percentile(flat, 99) * 1e3),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--export", required=True)
    p.add_argument("--engine", default=os.path.join(ROOT, "target/release/engine"))
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--batch-timeout-micros", type=int, default=500)
    a = p.parse_args()

    x = images(256)
    bodies = [json.dumps({"instances": [x[i].tolist()]}).encode() for i in range(len(x))]
    server = subprocess.Popen(
        [a.engine, "serve", a.export, "--port", "0", "--max-batch-size", str(a.max_batch_size),
         "--batch-timeout-micros", str(a.batch_timeout_micros)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = server.stdout.readline().strip()
    host, rest = url[len("http://"):].split("/", 1)
    path = "/" + rest + ":predict"
    conns = [None] * a.clients

    def engine_one(w, i):
        if conns[w] is None:
            conns[w] = http.client.HTTPConnection(host, timeout=60)
        c = conns[w]
        c.request("POST", path, body=bodies[(w * 31 + i) % len(bodies)],
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(body)

    session = ort.InferenceSession(os.path.join(a.export, "model.onnx"), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    singles = [x[i:i + 1] for i in range(len(x))]

    def ort_one(w, i):
        session.run(None, {name: singles[(w * 31 + i) % len(singles)]})

    # Warm-up of both, then interleaved rounds.
    load(a.clients, 200, engine_one)
    load(a.clients, 200, ort_one)
    rounds = []
    for r in range(a.rounds):
        e = load(a.clients, a.requests, engine_one)
        o = load(a.clients, a.requests, ort_one)
        rounds.append({"engine": e, "onnxruntime": o})
        print(f"round {r}: engine {e['requests_per_s']:.0f} req/s p50 {e['p50_ms']:.2f} ms p99 {e['p99_ms']:.2f} ms"
              f" | onnxruntime {o['requests_per_s']:.0f} req/s p50 {o['p50_ms']:.2f} ms p99 {o['p99_ms']:.2f} ms",
              flush=True)
    server.terminate()
    server.wait(timeout=30)
    med = {side: {k: float(np.median([r[side][k] for r in rounds])) for k in rounds[0][side]}
           for side in ("engine", "onnxruntime")}
    result = {"export": a.export, "clients": a.clients, "requests": a.requests,
              "max_batch_size": a.max_batch_size, "batch_timeout_micros": a.batch_timeout_micros,
              "cpus": os.cpu_count(), "rounds": rounds, "median": med}
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/serve_compare.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(med))


if __name__ == "__main__":
    sys.exit(main())
