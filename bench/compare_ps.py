"""parameter_server against TensorFlow's, side by side: 1 ps + 2 training tasks on this
machine, the tutorial CNN at batch 64 per task, interleaved runs (engine, TF, engine, ...).

    python3 bench/compare_ps.py --reps 3

Each side reports the updates its whole cluster applied per second, seen from its chief
(the global step's change over a window after warm-up), times the batch: see
engine_ps.py and tf_ps_estimator.py. Prints every run and the medians' ratio as JSON.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit(f"{' '.join(cmd)} exited with {out.returncode}")
    return json.loads(out.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ps", type=int, default=1)
    a = p.parse_args()
    tf_python = os.path.join(HERE, ".venv-tf", "bin", "python")
    engine_cmd = [sys.executable, os.path.join(HERE, "engine_ps.py"), "--workers", str(a.workers), "--ps", str(a.ps),
                  "--steps", "1400", "--warmup", "100"]
    tf_cmd = [tf_python, os.path.join(HERE, "tf_ps_estimator.py"), "--workers", str(a.workers), "--ps", str(a.ps),
              "--steps", "300", "--warmup", "50"]
    runs = {"engine": [], "tensorflow": []}
    for _ in range(a.reps):
        runs["engine"].append(run(engine_cmd)["examples_per_s"])
        runs["tensorflow"].append(run(tf_cmd)["examples_per_s"])
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(json.dumps({
        "runs_examples_per_s": runs,
        "median_examples_per_s": med,
        "engine_over_tensorflow": round(med["engine"] / med["tensorflow"], 2),
        "loadavg_end": os.getloadavg(),
    }, indent=1))


if __name__ == "__main__":
    main()
