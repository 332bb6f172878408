"""Engine benchmark: the real `engine` binary training a benchmark model on Fashion-MNIST.

The counterpart of tf_estimator.py: it runs `engine run specs/fashion_mnist_<model>.ron`
(`--model cnn|mlp|residual|vgg`, default cnn, or any `--spec`) as a child process and
prints one JSON object on stdout with the same fields (examples/s, wall and CPU ms per
step over the timed steps, time from process start to the end of the first training
step). The batch size and the length of an `--eval` run come from the spec, as in
tf_estimator.py. The name is historical (it began with the tutorial CNN only). Standard
library only; any python3 runs it.

    cargo build --release -p engine-cli
    python3 bench/engine_cnn.py --threads 1 --steps 1000 --warmup 100
    python3 bench/engine_cnn.py --model vgg --threads 1      # 30 timed steps after 5, batch 128
    python3 bench/engine_cnn.py --eval          # the spec's max_steps (CNN: 2814, 3 epochs), test accuracy

How it measures (see bench/README.md):
- Timed window: the engine logs `loss = ..., step = N` after step N has run, every
  `--log-every` steps. The window opens when the line for step `warmup` arrives and
  closes when the line for step `warmup + steps` arrives: exactly `steps` steps, with
  everything the Estimator does between steps inside. Arrival times are read here on a
  monotonic clock (the measurement does not rely on the program under test); the
  engine's own millisecond timestamps of the same two lines are reported beside them.
- CPU: the child's utime + stime (all threads) from /proc/<pid>/stat, sampled when the
  window's two lines arrive, as tf_estimator.py takes process_time() over its window.
  Cross-check: getrusage(RUSAGE_CHILDREN) totals of this run and of a second, short run
  (`warmup + 1` steps, same start-up) whose difference, divided by `steps`, is CPU per
  step with the start-up taken out.
- First step: from just before the spawn to the arrival of the `step = 0` line.
"""

import argparse
import ast
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import _models  # noqa: E402

# `I 2026-11-24 21:55:20.556 engine] loss = 0.9336241, step = 100 (1.079 sec)`; the prefix
# is UTC (older builds printed no date).
LOG_LINE = re.compile(rb"^([IWED]) (?:\d{4}-\d\d-\d\d )?(\d\d):(\d\d):(\d\d)\.(\d{3}) engine\] (.*)$")
STEP = re.compile(rb"\bstep = (\d+)\b")
RATE = re.compile(rb"^global_step/sec: ([0-9.]+), examples/sec: ([0-9.]+)")


class BenchError(Exception):
    """A problem with the inputs, the environment or the engine's run, shown without a traceback."""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=os.path.join(REPO, "target", "release", "engine"),
                   help="the engine binary (default: target/release/engine)")
    p.add_argument("--model", choices=sorted(_models.MODELS), default=None,
                   help="train specs/fashion_mnist_<model>.ron (default cnn)")
    p.add_argument("--spec", default=None, help="a spec of one's own instead of --model's")
    p.add_argument("--threads", type=int, default=None,
                   help="pin the engine to N CPUs and set RAYON_NUM_THREADS=N (default: rayon's default, all CPUs)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps after warm-up (default per model: " + _models.defaults_text("steps")
                        + "; 1000 for a --spec of one's own)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps first (default per model: " + _models.defaults_text("warmup")
                        + "; 100 for --spec)")
    p.add_argument("--log-every", type=int, default=None,
                   help="run_config.log_step_count_steps; --warmup and --steps must be multiples of it "
                        "(default: the largest divisor of both up to 100, the engine's and TF's default)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="train_input.batch_size (default: the spec's)")
    p.add_argument("--seed", type=int, default=None, help="run_config.random_seed (default: the spec's)")
    p.add_argument("--eval", action="store_true",
                   help="train the spec's train_spec.max_steps with its evaluation; report test accuracy")
    p.add_argument("--no-cpu-check", action="store_true",
                   help="skip the second, short run behind cpu_ms_per_step_rusage_diff")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="more spec overrides, passed to the engine as --set")
    p.add_argument("--device", default=None, help="the engine's --device (cpu, wgpu:0, cuda:0); default cpu")
    p.add_argument("--log", default=None, help="also write the engine's stderr to this file")
    a = p.parse_args()
    if a.model is not None and a.spec is not None:
        p.error("give --model or --spec, not both")
    if a.spec is None:
        a.model = a.model or "cnn"
        a.spec = _models.spec_path(a.model)
    else:
        a.spec = os.path.abspath(a.spec)  # the engine runs in the repository root
        a.model = _models.model_of_spec(a.spec)
    try:
        a.facts = _models.spec_facts(a.spec)
    except _models.SpecError as e:
        p.error(str(e))
    defaults = _models.MODELS.get(a.model, {"steps": 1000, "warmup": 100})
    a.steps = defaults["steps"] if a.steps is None else a.steps
    a.warmup = defaults["warmup"] if a.warmup is None else a.warmup
    a.batch_size = a.facts["batch_size"] if a.batch_size is None else a.batch_size
    if a.steps < 1 or a.warmup < 0 or a.batch_size < 1 or (a.log_every is not None and a.log_every < 1):
        p.error("--steps, --batch-size and --log-every must be >= 1, --warmup >= 0")
    if a.log_every is None:
        a.log_every = _models.default_log_every(a.warmup, 100 if a.eval else a.steps)
    if a.eval:
        max_steps = a.facts["max_steps"]
        last_logged = (max_steps - 1) // a.log_every * a.log_every
        a.steps = last_logged - a.warmup
        if a.steps < 1:
            p.error(f"--warmup must be below {last_logged} (the last logged step before the spec's "
                    f"max_steps {max_steps}) with --eval")
    if a.warmup % a.log_every or a.steps % a.log_every:
        p.error(f"--warmup ({a.warmup}) and --steps ({a.steps}) must be multiples of --log-every ({a.log_every}): "
                "the window is cut at the engine's `step = N` log lines")
    return a


def child_cpu_s(pid):
    """utime + stime of a live process, all threads, in seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14, 15 overall


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def log_time_s(m):
    """The engine's timestamp of a log line: seconds after UTC midnight."""
    return int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4)) + int(m.group(5)) / 1e3


def day_diff(later, earlier):
    """later - earlier for seconds-of-day stamps, across one midnight."""
    d = later - earlier
    return d + 86400 if d < -43200 else d


def engine_command(args, max_steps, model_dir):
    cmd = [args.engine, "run", args.spec, "--max-steps", str(max_steps), "--model-dir", model_dir,
           "--set", f"train_input.batch_size={args.batch_size}",
           "--set", f"run_config.log_step_count_steps={args.log_every}"]
    if not args.eval:
        # tf_estimator.py calls Estimator.train: no evaluation.
        cmd += ["--set", "eval_input=None"]
    if args.seed is not None:
        cmd += ["--set", f"run_config.random_seed={args.seed}"]
    for s in args.set:
        cmd += ["--set", s]
    if args.device is not None:
        cmd += ["--device", args.device]
    return cmd


def child_env_and_pin(threads):
    env = dict(os.environ)
    env["ENGINE_LOG"] = "info"
    env.pop("ENGINE_LOG_PREFIX", None)
    cpus = sorted(os.sched_getaffinity(0))
    if threads is None:
        env.pop("RAYON_NUM_THREADS", None)
        return env, cpus
    if threads < 1:
        raise BenchError(f"--threads must be >= 1, got {threads}")
    if threads > len(cpus):
        raise BenchError(f"--threads {threads} but only {len(cpus)} CPUs are available: {cpus}")
    env["RAYON_NUM_THREADS"] = str(threads)
    return env, cpus[:threads]


def run_engine(args, max_steps, window, env, cpus):
    """Runs the engine once; returns what was seen. `window` = (first, last) logged step, or None."""
    model_dir = tempfile.mkdtemp(prefix=f"engine_{args.model or 'spec'}_")
    cmd = engine_command(args, max_steps, model_dir)
    seen = {"log_steps": {}, "rates": [], "stderr": []}
    try:
        cpu_before = children_cpu_s()
        wall_spawn = time.time()
        t_spawn = time.perf_counter()
        try:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO,
                preexec_fn=lambda: os.sched_setaffinity(0, set(cpus)),
            )
        except OSError as e:
            raise BenchError(f"{args.engine}: cannot start it ({e}); build it with "
                             "`cargo build --release -p engine-cli`") from None
        fd = proc.stderr.fileno()
        pending = b""
        while True:
            chunk = os.read(fd, 65536)
            t = time.perf_counter()
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                seen["stderr"].append(line)
                m = LOG_LINE.match(line)
                if not m:
                    continue
                msg = m.group(6)
                rate = RATE.match(msg)
                if rate:
                    seen["rates"].append(float(rate.group(2)))
                    continue
                step = STEP.search(msg)
                if step and not msg.startswith(b"Saving"):
                    n = int(step.group(1))
                    cpu = child_cpu_s(proc.pid) if window and n in window else None
                    seen["log_steps"][n] = (t - t_spawn, log_time_s(m), cpu)
        stdout = proc.stdout.read()
        rc = proc.wait()
        seen["cpu_total_s"] = children_cpu_s() - cpu_before
        seen["wall_total_s"] = time.perf_counter() - t_spawn
        seen["wall_spawn_day_s"] = wall_spawn % 86400
        seen["stdout"] = stdout.decode(errors="replace").strip()
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    if args.log:
        with open(args.log, "ab") as f:
            f.write(b"\n".join(seen["stderr"]) + b"\n")
    if rc != 0:
        tail = b"\n".join(seen["stderr"][-20:]).decode(errors="replace")
        raise BenchError(f"`{' '.join(cmd)}` exited with status {rc}; its last log lines:\n{tail}")
    return seen


def window_report(args, seen):
    first, last = args.warmup, args.warmup + args.steps
    logs = seen["log_steps"]
    for n in (0, first, last):
        if n not in logs:
            raise BenchError(f"the engine did not log `step = {n}` (logged: {sorted(logs)[:8]}...); "
                             f"is run_config.log_step_count_steps overridden?")
    (t0, log0, cpu0), (t1, log1, cpu1) = logs[first], logs[last]
    wall = t1 - t0
    wall_log = day_diff(log1, log0)
    n = args.steps
    # ms per step of each logging interval inside the window, from arrival times
    marks = [s for s in sorted(logs) if first <= s <= last]
    intervals = sorted((logs[b][0] - logs[a][0]) * 1e3 / (b - a) for a, b in zip(marks, marks[1:]))
    out = {
        "timed_steps": n,
        "timed_wall_s": wall,
        "timed_wall_s_log_timestamps": wall_log,
        "examples_per_s": n * args.batch_size / wall,
        "wall_ms_per_step": wall * 1e3 / n,
        "session_run_ms_median": None,  # the engine does not expose single run calls
        "interval_ms_per_step_median": intervals[len(intervals) // 2] if intervals else None,
        "engine_examples_per_s_logged": seen["rates"],
    }
    if cpu0 is not None and cpu1 is not None:
        out["cpu_ms_per_step"] = (cpu1 - cpu0) * 1e3 / n
        out["cpu_cores_busy"] = (cpu1 - cpu0) / wall
    t_first, log_first, _ = logs[0]
    out["process_start_to_first_step_s"] = t_first
    out["process_start_to_first_step_s_log_timestamps"] = day_diff(log_first, seen["wall_spawn_day_s"])
    return out


def engine_version(path):
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"{path}: cannot run it ({e}); build it with `cargo build --release -p engine-cli`") from None
    return r.stdout.strip() or None


def main():
    args = parse_args()
    version = engine_version(args.engine)
    env, cpus = child_env_and_pin(args.threads)
    env_start = {"nproc": os.cpu_count(), "cpus_allowed": cpus, "loadavg": list(os.getloadavg())}
    window = (args.warmup, args.warmup + args.steps)
    max_steps = args.facts["max_steps"] if args.eval else args.warmup + args.steps + 1
    seen = run_engine(args, max_steps, window, env, cpus)
    report = {
        "bench": f"engine_{args.model}" if args.model else "engine_cnn",
        "model": args.model,
        "spec": os.path.relpath(os.path.abspath(args.spec), REPO),
        "engine": version,
        "engine_path": os.path.abspath(args.engine),
        "command": engine_command(args, max_steps, "<tempdir>"),
        "threads": args.threads,
        "cpus": cpus,
        "batch_size": args.batch_size,
        "warmup_steps": args.warmup,
        "log_every": args.log_every,
        "max_steps": max_steps,
        "wall_total_s": seen["wall_total_s"],
        "cpu_total_s": seen["cpu_total_s"],
    }
    report.update(window_report(args, seen))
    if args.eval:
        try:
            result = ast.literal_eval(seen["stdout"].splitlines()[-1])
            report["eval"] = {k: float(v) for k, v in result.items()}
        except (ValueError, SyntaxError, IndexError, AttributeError):
            raise BenchError(f"cannot read the evaluation result from the engine's stdout: {seen['stdout']!r}") from None
    elif not args.no_cpu_check:
        short = run_engine(args, args.warmup + 1, None, env, cpus)
        report["cpu_total_s_short_run"] = short["cpu_total_s"]
        report["short_run_max_steps"] = args.warmup + 1
        report["cpu_ms_per_step_rusage_diff"] = (seen["cpu_total_s"] - short["cpu_total_s"]) * 1e3 / args.steps
    report["env_start"] = env_start
    report["loadavg_end"] = list(os.getloadavg())
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"engine_cnn: {e}", file=sys.stderr)
        sys.exit(2)
