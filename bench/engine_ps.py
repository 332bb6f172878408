"""The engine's parameter_server on this machine: the counterpart of tf_ps_estimator.py.

Runs `engine launch SPEC --ps P --workers N` (real processes, TF_CONFIG each, variables on
the ps tasks, asynchronous updates) on the tutorial CNN with `--batch-size` per training
task, and prints JSON with the aggregate examples/s: the updates the whole cluster applied
per second, seen from the chief, times the batch.

    python3 bench/engine_ps.py --workers 2 --ps 1

The chief logs the global step (`step = S`, which counts every task's updates) every
`--log-every` of its own steps; the window runs from its first such line at or past
`--warmup` to its last, with arrival times taken here (monotonic clock), so examples/s =
(S_last - S_first) x batch-size / window. Standard-library Python.
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


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=os.path.join(REPO, "target", "release", "engine"))
    p.add_argument("--spec", default=os.path.join(REPO, "specs", "fashion_mnist_cnn.ron"))
    p.add_argument("--workers", type=int, default=2, help="training tasks (worker 0 is the chief)")
    p.add_argument("--ps", type=int, default=1)
    p.add_argument("--threads-per-task", type=int, default=None,
                   help="RAYON_NUM_THREADS of each task (default: rayon's, all CPUs)")
    p.add_argument("--steps", type=int, default=600, help="global steps in the window (about)")
    p.add_argument("--warmup", type=int, default=100, help="global steps before the window")
    p.add_argument("--log-every", type=int, default=25, help="the chief logs every this many of its steps")
    p.add_argument("--batch-size", type=int, default=64, help="per training task (default 64)")
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args()
    if a.workers < 1 or a.ps < 1 or a.steps < 1 or a.log_every < 1:
        p.error("--workers, --ps, --steps and --log-every must be >= 1")
    if not os.access(a.engine, os.X_OK):
        p.error(f"{a.engine} is not an executable: cargo build --release -p engine-cli")
    return a


def main():
    a = parse_args()
    model_dir = tempfile.mkdtemp(prefix="engine-ps-")
    cmd = [a.engine, "launch", a.spec, "--ps", str(a.ps), "--workers", str(a.workers),
           "--max-steps", str(a.warmup + a.steps), "--model-dir", model_dir,
           "--set", "eval_input=None",
           "--set", f"train_input.batch_size={a.batch_size}",
           "--set", f"run_config.log_step_count_steps={a.log_every}"]
    env = dict(os.environ, ENGINE_LOG="info")
    if a.threads_per_task is not None:
        env["RAYON_NUM_THREADS"] = str(a.threads_per_task)
    load_before = os.getloadavg()
    started = time.monotonic()
    marks = []
    tail = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for line in proc.stdout:
            now = time.monotonic()
            tail = (tail + [line.rstrip()])[-40:]
            m = STEP_LINE.match(line)
            if m and int(m.group(1)) >= a.warmup:
                marks.append((now, int(m.group(1))))
            if now - started > a.timeout:
                proc.kill()
                raise SystemExit(f"timed out after {a.timeout} s")
        status = proc.wait()
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    if status != 0 or len(marks) < 2:
        sys.stderr.write("\n".join(tail) + "\n")
        raise SystemExit(f"engine launch exited with {status}; {len(marks)} step lines past the warm-up")
    (t0, s0), (t1, s1) = marks[0], marks[-1]
    rate = (s1 - s0) / (t1 - t0)
    print(json.dumps({
        "framework": "engine",
        "strategy": "parameter_server",
        "training_tasks": a.workers,
        "ps_tasks": a.ps,
        "threads_per_task": a.threads_per_task,
        "batch_per_task": a.batch_size,
        "global_steps_timed": s1 - s0,
        "window_s": round(t1 - t0, 4),
        "global_steps_per_s": round(rate, 2),
        "examples_per_s": round(rate * a.batch_size, 1),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "command": " ".join(cmd),
    }, indent=2))


if __name__ == "__main__":
    main()
