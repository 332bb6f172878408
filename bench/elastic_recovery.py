#!/usr/bin/env python3
"""What losing a worker costs: an elastic job (--min-workers) against a whole-cluster
restart from the last checkpoint (--restart-on-failure), on the same spec and fault.

Each run is `engine launch` with three workers; ENGINE_FAULT_EXIT_AT_STEP makes worker:2
exit at step K of the first start (the process ends, its sockets close, as on SIGKILL).
From the launcher's prefixed log (every step logged) it reports:
  - recovery: seconds from the fault to the first step completed after it;
  - back at K: seconds from the fault until the job completes step K + 1 again;
  - recomputed: steps run twice (K minus the step the job went on from);
  - rejoined (the elastic job with --restart-on-failure 1, which starts worker:2 again
    alone): seconds from that restart until the job goes on with three workers again.

  python3 bench/elastic_recovery.py --engine target/release/engine [--fault-step 150] [--reps 3]
"""
import argparse
import datetime
import os
import re
import subprocess
import tempfile

STAMP = re.compile(r"(?:^|\] )[IWE] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) engine\] (.*)")


def when(text):
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def run(engine, spec, mode, fault_step, steps, every):
    with tempfile.TemporaryDirectory() as model_dir:
        args = [engine, "launch", spec, "--workers", "3", "--max-steps", str(steps), "--model-dir", model_dir,
                "--set", "train_input.batch_size=8", "--set", "eval_spec.steps=1",
                "--set", f"run_config.save_checkpoints_steps={every}", "--set", "run_config.log_step_count_steps=1"]
        args += {"elastic": ["--min-workers", "2"], "rejoin": ["--min-workers", "2", "--restart-on-failure", "1"],
                 "restart": ["--restart-on-failure", "1"]}[mode]
        env = dict(os.environ, ENGINE_FAULT_EXIT_AT_STEP=f"worker:2@{fault_step}")
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise SystemExit(f"{mode} run failed:\n{out.stderr[-3000:]}")
        fault, first_after, back, went_on_from = None, None, None, None
        restarted, rejoined = None, None
        for line in out.stderr.splitlines():
            m = STAMP.search(line)
            if not m:
                continue
            t, msg = when(m.group(1)), m.group(2)
            if "starting it again to rejoin" in msg:
                restarted = t
            if restarted is not None and rejoined is None and "with 3 worker(s)" in msg:
                rejoined = t - restarted
            if "exits at step" in msg:
                fault = t
                continue
            if fault is None:
                continue
            if went_on_from is None:
                resumed = re.search(r"Continuing from step (\d+)", msg) or re.search(r"model\.ckpt-(\d+)", msg) \
                    if ("Continuing from step" in msg or "Restoring parameters from" in msg) else None
                if resumed:
                    went_on_from = int(resumed.group(1))
            step = re.search(r"step = (\d+)", msg)
            if step and line.startswith("[worker:0]") or (step and mode != "restart" and line.startswith("[worker:")):
                n = int(step.group(1))
                if went_on_from is not None and first_after is None:
                    first_after = t
                if n > fault_step and back is None:
                    back = t
        if None in (fault, first_after, back, went_on_from):
            raise SystemExit(f"{mode}: could not read the log ({fault}, {first_after}, {back}, {went_on_from})")
        return first_after - fault, back - fault, fault_step - went_on_from, rejoined


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--spec", default="specs/fashion_mnist_cnn.ron")
    p.add_argument("--fault-step", type=int, default=150)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    print("| run | mode | recovery (s) | back at step K+1 (s) | steps recomputed | three again after the restart (s) |")
    print("|---|---|---|---|---|---|")
    for rep in range(a.reps):
        for mode in ("elastic", "rejoin", "restart"):
            r, b, s, j = run(a.engine, a.spec, mode, a.fault_step, a.steps, a.checkpoint_every)
            joined = f"{j:.3f}" if j is not None else "-"
            print(f"| {rep + 1} | {mode} | {r:.3f} | {b:.3f} | {s} | {joined} |", flush=True)


if __name__ == "__main__":
    main()
