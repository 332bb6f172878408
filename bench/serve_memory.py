#!/usr/bin/env python3
"""`engine serve`'s memory under large requests: the load of issue 37's row 3.

Serves an export (made by a 2-step MLP run unless --export names one), sends one request
of N instances, then K of them at once, and prints the server's peak and idle resident
memory (VmHWM, VmRSS) after each phase, and the statuses it answered.

    python3 bench/serve_memory.py --engine target/release/engine --instances 20000 --concurrent 6
"""

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time


def memory_mib(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmHWM", "VmRSS"):
                fields[name] = int(rest.split()[0]) // 1024
    return fields["VmHWM"], fields["VmRSS"]


def body(instances, seed):
    rng = random.Random(seed)
    # One digit per pixel, compact: about 3.1 KB of JSON per 28x28x1 image, as in the
    # issue's 60.9 MiB request of 20,000 instances.
    image = [[[rng.randint(0, 9)] for _ in range(28)] for _ in range(28)]
    return json.dumps({"instances": [image] * instances}, separators=(",", ":")).encode()


def post(address, payload, statuses):
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    try:
        conn.request("POST", "/v1/models/model:predict", payload, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
    except Exception as e:  # a refused or dropped connection is a result too
        statuses.append(type(e).__name__)
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", default="target/release/engine")
    p.add_argument("--export")
    p.add_argument("--instances", type=int, default=20000)
    p.add_argument("--concurrent", type=int, default=6)
    p.add_argument("serve_args", nargs="*", help="extra `engine serve` flags, after --")
    a = p.parse_args()
    tmp = tempfile.mkdtemp()
    export = a.export
    if export is None:
        subprocess.run(
            [a.engine, "run", "specs/fashion_mnist_mlp.ron", "--max-steps", "2", "--model-dir", tmp,
             "--set", "eval_spec.steps=1", "--set", "eval_spec.exporters=[Latest(exports_to_keep: 1)]"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        export = os.path.join(tmp, "export/latest")
    server = subprocess.Popen([a.engine, "serve", export, "--port", "0", *a.serve_args],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = server.stdout.readline().strip()
    address = url.removeprefix("http://").split("/")[0]
    payload = body(a.instances, 1)
    print(f"request: {a.instances} instances, {len(payload) / 2**20:.1f} MiB")
    print(f"started: peak/now {memory_mib(server.pid)} MiB")
    statuses = []
    post(address, payload, statuses)
    time.sleep(1)
    print(f"one request: statuses {statuses}; peak/now {memory_mib(server.pid)} MiB")
    statuses = []
    threads = [threading.Thread(target=post, args=(address, payload, statuses)) for _ in range(a.concurrent)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(1)
    print(f"{a.concurrent} at once: statuses {sorted(map(str, statuses))}; peak/now {memory_mib(server.pid)} MiB")
    time.sleep(5)
    print(f"idle 5 s later: peak/now {memory_mib(server.pid)} MiB")
    server.terminate()
    server.wait()


if __name__ == "__main__":
    sys.exit(main())
