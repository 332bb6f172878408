"""Prints the peer results in bench/results/ (or the folder given) as Markdown tables.

Standard library only, so any python3 runs it.
"""

import json
import os
import sys


def load(folder, name):
    path = os.path.join(folder, name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as e:
        sys.exit(f"summarize: {path}: not valid JSON: {e}")


def fmt(value, digits=1):
    return "-" if value is None else f"{value:,.{digits}f}"


def load_of(report):
    start = report.get("env_start", {}).get("loadavg") or report.get("loadavg_start")
    return fmt(start[0], 2) if start else "-"


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    rows = []
    for name in ("tf_estimator_cnn_t1", "tf_estimator_cnn_t2", "tf_estimator_cnn_eval"):
        r = load(folder, name)
        if r:
            rows.append((name, r))
    if rows:
        print("| TF 2.15 Estimator, CNN batch 64 | threads | examples/s | wall ms/step | CPU ms/step "
              "| process start → first step (s) | import TF (s) | test acc | load avg 1m |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, r in rows:
            acc = r.get("eval", {}).get("accuracy")
            print(f"| {name} | {r['threads'] or 'default'} | {fmt(r['examples_per_s'], 0)} "
                  f"| {fmt(r['wall_ms_per_step'], 2)} | {fmt(r['cpu_ms_per_step'], 2)} "
                  f"| {fmt(r.get('process_start_to_first_step_s'), 2)} | {fmt(r.get('import_tensorflow_s'), 2)} "
                  f"| {fmt(acc, 4)} | {load_of(r)} |")
        print()
    rows = [(n, load(folder, n)) for n in ("tf_mwms_estimator_w1", "tf_mwms_estimator_w2")]
    rows = [(n, r) for n, r in rows if r]
    if rows:
        print("| TF 2.15 Estimator + MultiWorkerMirroredStrategy | workers | global batch | examples/s (all workers) "
              "| wall ms/step | CPU ms/step (sum) | slowest first step (s) | load avg 1m |")
        print("|---|---|---|---|---|---|---|---|")
        for name, r in rows:
            print(f"| {name} | {r['workers']} | {r['global_batch_size']} | {fmt(r['examples_per_s'], 0)} "
                  f"| {fmt(r['wall_ms_per_step'], 2)} | {fmt(r['cpu_ms_per_step_all_workers'], 2)} "
                  f"| {fmt(r['process_start_to_first_step_s_max'], 2)} | {load_of(r)} |")
        print()
    r = load(folder, "torch_gloo_allreduce")
    if r:
        print(f"| torch {r['torch']} gloo all_reduce, {r['world_size']} processes | median latency (µs) "
              f"| bus bandwidth (GB/s) | iterations |")
        print("|---|---|---|---|")
        for s in r["sizes"]:
            b = s["bytes"]
            size = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"
            print(f"| {size} | {fmt(s['median_latency_us'], 0)} | {fmt(s['busbw_GBps'], 3)} | {s['iters']} |")
        print(f"\nload average (1m) at start: {load_of(r)}")


if __name__ == "__main__":
    main()
