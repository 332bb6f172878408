"""The engine's multi_worker on N processes of this machine: the counterpart of tf_mwms_estimator.py.

Runs `engine launch SPEC --workers N` (real processes, TF_CONFIG each, collectives over
gRPC or shared memory) on the tutorial CNN with `--batch-size` per worker, and prints
JSON with the aggregate examples/s of the cluster over a window of `--steps` steps after
`--warmup`:

    python3 bench/engine_mwms.py --workers 2 --threads-per-worker 1
    python3 bench/engine_mwms.py --workers 2 --communication ring
    python3 bench/engine_mwms.py --workers 1

Training is synchronous, so the chief's steps are the cluster's: the window opens when the
chief's `step = warmup` log line arrives and closes with `step = warmup + steps` (arrival
times taken here, monotonic clock). examples/s = steps x workers x batch-size / window.
Standard-library Python.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP_LINE = re.compile(r"^\[worker:0\] .*\bstep = (\d+)")
PATH_LINE = re.compile(r"^\[worker:0\] .*all-reduce (through shared memory|over the gRPC ring[^\n]*)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=os.path.join(REPO, "target", "release", "engine"))
    p.add_argument("--spec", default=os.path.join(REPO, "specs", "fashion_mnist_cnn.ron"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads-per-worker", type=int, default=None,
                   help="RAYON_NUM_THREADS of each task (default: rayon's, all CPUs)")
    p.add_argument("--communication", choices=["auto", "ring", "shared_memory"], default="auto")
    p.add_argument("--cpu-bind", choices=["auto", "none"], default="auto",
                   help="engine launch's --cpu-bind: a disjoint share of the CPUs per worker (auto) or none")
    p.add_argument("--steps", type=int, default=1000, help="timed steps (a multiple of --log-every)")
    p.add_argument("--warmup", type=int, default=100, help="untimed steps first (a multiple of --log-every)")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64, help="per worker (default 64)")
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args()
    if a.workers < 1 or a.steps < 1 or a.steps % a.log_every or a.warmup % a.log_every:
        p.error("--workers >= 1; --steps and --warmup must be multiples of --log-every")
    if not os.access(a.engine, os.X_OK):
        p.error(f"{a.engine} is not an executable: cargo build --release -p engine-cli")
    return a


def main():
    a = parse_args()
    model_dir = tempfile.mkdtemp(prefix="engine-mwms-")
    communication = {"auto": "Auto", "ring": "Ring", "shared_memory": "SharedMemory"}[a.communication]
    cmd = [a.engine, "launch", a.spec, "--workers", str(a.workers),
           "--max-steps", str(a.warmup + a.steps + 1), "--model-dir", model_dir,
           "--set", "eval_input=None",
           "--set", f"train_input.batch_size={a.batch_size}",
           "--set", f"run_config.log_step_count_steps={a.log_every}",
           "--set", f"run_config.communication={communication}",
           "--cpu-bind", a.cpu_bind]
    env = dict(os.environ, ENGINE_LOG="info")
    if a.threads_per_worker is not None:
        env["RAYON_NUM_THREADS"] = str(a.threads_per_worker)
    load_before = os.getloadavg()
    started = time.monotonic()
    seen = {}
    path = None
    tail = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for line in proc.stdout:
            now = time.monotonic()
            tail = (tail + [line.rstrip()])[-40:]
            m = STEP_LINE.match(line)
            if m:
                seen.setdefault(int(m.group(1)), now)
            m = PATH_LINE.match(line)
            if m:
                path = m.group(1)
            if now - started > a.timeout:
                proc.kill()
                raise SystemExit(f"timed out after {a.timeout} s")
        status = proc.wait()
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    first, last = a.warmup, a.warmup + a.steps
    if status != 0 or first not in seen or last not in seen:
        sys.stderr.write("\n".join(tail) + "\n")
        raise SystemExit(f"engine launch exited with {status}; steps seen: {sorted(seen)[:5]}...")
    window = seen[last] - seen[first]
    global_batch = a.workers * a.batch_size
    print(json.dumps({
        "framework": "engine",
        "strategy": "multi_worker",
        "workers": a.workers,
        "threads_per_worker": a.threads_per_worker,
        "communication": a.communication,
        "cpu_bind": a.cpu_bind,
        "all_reduce_path": path,
        "batch_per_worker": a.batch_size,
        "global_batch": global_batch,
        "timed_steps": a.steps,
        "window_s": round(window, 4),
        "wall_ms_per_step": round(window / a.steps * 1e3, 3),
        "examples_per_s": round(a.steps * global_batch / window, 1),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "command": " ".join(cmd),
    }, indent=2))


if __name__ == "__main__":
    main()
