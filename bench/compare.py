"""Engine vs TensorFlow 2.15 Estimator on one benchmark model (Fashion-MNIST), interleaved.

`--model cnn|mlp|residual|vgg` picks specs/fashion_mnist_<model>.ron and its TensorFlow
twin (bench/_tfmodels.py). Builds the engine in release, then runs bench/tf_estimator.py
and bench/engine_cnn.py alternately (per repetition and thread count: TF then engine, the
next repetition engine then TF) so that slow drifts of the shared machine's load hit both
alike. Before the runs it takes the model's flops per step from `engine plan` and measures
the single-core f32 GEMM peak (bench/gemm_peak.py, pinned like the 1-thread runs), so the
table can say how much of the core's arithmetic each framework gets out of the model.
Writes bench/results/<model>_compare.json (every run's report, the machine, the commands)
and bench/results/<model>_compare.md (the table for BENCHMARKS.md), and prints the table.
Standard library only.

    python3 bench/compare.py --model mlp                 # 3 repetitions, 1 and 2 threads
    python3 bench/compare.py --model vgg --no-build --wait-quiet 600
    python3 bench/compare.py --model residual --reps 5 --steps 1000
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import _models  # noqa: E402
from quiet import busy_fraction, cpu_jiffies, wait_quiet  # noqa: E402

TF_PYTHON = os.path.join(HERE, ".venv-tf", "bin", "python")

# (key in a report, column title, digits)
METRICS = [
    ("examples_per_s", "examples/s", 0),
    ("wall_ms_per_step", "wall ms/step", 2),
    ("cpu_ms_per_step", "CPU ms/step", 2),
    ("process_start_to_first_step_s", "process start → first step (s)", 2),
    ("gflops_per_core", "GFLOP/s per core", 1),
    ("percent_of_peak", "% of 1-core GEMM peak", 1),
]

NAMES = {"tf": "TF 2.15 Estimator", "engine": "engine"}

# `  flops per step         57041.338 M` under `statistics at batch 128 (per replica):`
PLAN_FLOPS = re.compile(r"^\s*flops per step\s+([0-9.]+)\s*([KMGT]?)\s*$", re.M)
PLAN_BATCH = re.compile(r"^statistics at batch (\d+)", re.M)
UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


class BenchError(Exception):
    """A problem with the inputs, the environment or a run, shown without a traceback."""


def parse_args(argv, prog):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(_models.MODELS), required=True,
                   help="which spec and TensorFlow twin to compare")
    p.add_argument("--reps", type=int, default=3, help="runs of each configuration (default 3)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps (default per model: " + _models.defaults_text("steps") + ")")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps first (default per model: " + _models.defaults_text("warmup") + ")")
    p.add_argument("--log-every", type=int, default=None,
                   help="run_config.log_step_count_steps for both frameworks; it must divide --warmup and "
                        "--steps, where engine_cnn.py cuts its window (default: the largest divisor of both "
                        "up to 100)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    p.add_argument("--engine", default=os.path.join(REPO, "target", "release", "engine"))
    p.add_argument("--no-build", action="store_true", help="use the engine binary as it is")
    p.add_argument("--rev", default=None,
                   help="build this committed revision instead of the working tree: `git archive` into "
                        "bench/.build/src, target dir bench/.build/target (the first build there is a full one)")
    p.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                   help="before each run (and the GEMM peak), wait up to SECONDS for the CPUs to be idle "
                        "(under 10%% busy over 3 s); other people's builds on a 2-core machine distort the "
                        "figures badly")
    p.add_argument("--no-gemm-peak", action="store_true",
                   help="skip the GEMM peak measurement (the %% of peak column stays empty)")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per run (default 600)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="folder for <model>_compare.{json,md}")
    p.add_argument("--render", action="store_true",
                   help="only rewrite <model>_compare.md from the folder's <model>_compare.json and print it")
    a = p.parse_args(argv)
    defaults = _models.MODELS[a.model]
    a.steps = defaults["steps"] if a.steps is None else a.steps
    a.warmup = defaults["warmup"] if a.warmup is None else a.warmup
    if a.reps < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--reps and --steps must be >= 1, --warmup >= 0")
    if a.log_every is None:
        a.log_every = _models.default_log_every(a.warmup, a.steps)
    elif a.log_every < 1 or a.warmup % a.log_every or a.steps % a.log_every:
        p.error(f"--log-every ({a.log_every}) must be >= 1 and divide --warmup ({a.warmup}) and "
                f"--steps ({a.steps})")
    if any(t < 1 for t in a.threads):
        p.error("--threads must all be >= 1")
    return a


def machine():
    model = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "cpu_model": model,
        "nproc": os.cpu_count(),
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
    }


def git_revision():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def build(rev, who):
    """Builds the engine; returns (binary, what was built)."""
    cmd = ["cargo", "build", "--release", "-p", "engine-cli"]
    if rev is None:
        print(f"{who}: {' '.join(cmd)}", file=sys.stderr)
        r = subprocess.run(cmd, cwd=REPO)
        if r.returncode != 0:
            raise BenchError(f"`{' '.join(cmd)}` failed with status {r.returncode}")
        return os.path.join(REPO, "target", "release", "engine"), git_revision()
    # Other people's unfinished edits in the shared working tree do not get into a
    # committed revision: it is what the figures can be reproduced from.
    try:
        full = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", rev + "^{commit}"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise BenchError(f"--rev {rev}: not a commit of {REPO} ({e})") from None
    build_dir = os.path.join(HERE, ".build")
    src = os.path.join(build_dir, "src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    archive = subprocess.Popen(["git", "-C", REPO, "archive", full], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", src], stdin=archive.stdout)
    archive.stdout.close()
    if archive.wait() != 0 or untar.returncode != 0:
        raise BenchError(f"--rev {rev}: `git archive {full} | tar -x -C {src}` failed")
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(build_dir, "target"))
    print(f"{who}: {' '.join(cmd)} at {full[:12]} in {src}", file=sys.stderr)
    r = subprocess.run(cmd, cwd=src, env=env)
    if r.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` at {full[:12]} failed with status {r.returncode}")
    return os.path.join(build_dir, "target", "release", "engine"), full[:12]


def plan_flops(engine, spec, batch):
    """Flops of one training step at `batch` (per replica), from `engine plan`.

    The engine counts every op of the compiled training plan (convolutions, products and
    their gradients, elementwise ops, pooling, the optimizer's update); the same count is
    used for TensorFlow, which runs the same model.
    """
    cmd = [engine, "plan", spec, "--batch", str(batch)]
    try:
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"`{' '.join(cmd)}` could not run ({e})") from None
    if r.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` exited with status {r.returncode}:\n{r.stderr[-2000:]}")
    m, b = PLAN_FLOPS.search(r.stdout), PLAN_BATCH.search(r.stdout)
    if not m or not b:
        raise BenchError(f"`{' '.join(cmd)}` printed no `statistics at batch N` / `flops per step X M` lines")
    if int(b.group(1)) != batch:
        raise BenchError(f"`{' '.join(cmd)}` gave statistics at batch {b.group(1)}, not {batch}")
    return float(m.group(1)) * UNITS[m.group(2)]


def run_one(cmd, timeout):
    """Runs a benchmark script in its own process group; returns its JSON report with the
    machine's CPU use by others during the run (busy time not spent by this run's processes)."""
    b0, t0 = cpu_jiffies()
    ru0 = os.times()
    w0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise BenchError(f"`{' '.join(cmd)}` ran past {timeout:.0f} s and was killed") from None
    wall = time.perf_counter() - w0
    ru1 = os.times()
    b1, t1 = cpu_jiffies()
    if proc.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` exited with status {proc.returncode}:\n{err[-3000:]}")
    try:
        report = json.loads(out)
    except ValueError as e:
        raise BenchError(f"`{' '.join(cmd)}` printed no JSON report ({e}):\n{out[-2000:]}") from None
    tick = os.sysconf("SC_CLK_TCK")
    ours = (ru1.children_user + ru1.children_system) - (ru0.children_user + ru0.children_system)
    ours += (ru1.user + ru1.system) - (ru0.user + ru0.system)
    ncpu = os.cpu_count() or 1
    span = (t1 - t0) / tick / ncpu  # seconds of wall time as /proc/stat counted it
    report["others_cpu_cores"] = max((b1 - b0) / tick - ours, 0.0) / max(span, 1e-9)
    report["run_wall_s"] = wall
    return report


def commands(args, threads, engine=None):
    common = ["--model", args.model, "--threads", str(threads), "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--log-every", str(args.log_every)]
    return {
        "tf": [TF_PYTHON, os.path.join(HERE, "tf_estimator.py")] + common,
        "engine": [sys.executable, os.path.join(HERE, "engine_cnn.py"), "--engine", engine or args.engine] + common,
    }


def gemm_command():
    # Pinned as the 1-thread runs are: the first allowed CPU, one BLAS thread.
    return [TF_PYTHON, os.path.join(HERE, "gemm_peak.py"), "--threads", "1"]


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt(s, digits):
    if s is None:
        return "-"
    f = f"{{:,.{digits}f}}"
    return f"{f.format(s['median'])} ({f.format(s['min'])}–{f.format(s['max'])})"


def quiet_note(result):
    waited = [r["report"].get("busy_before_run") for r in result["runs"]]
    if waited and all(b is not None for b in waited):
        return (f"each run began once the CPUs were under 10 % busy over 3 s (at most "
                f"{max(waited):.0%})")
    return f"CPUs {result['busy_before']:.0%} busy in the 3 s before the first run"


def workload_note(result):
    """The model, its arithmetic and the peak it is measured against (absent from files
    written by compare_cnn.py before these columns existed)."""
    parts = []
    model = result.get("model", "cnn")
    spec = result.get("spec") or _models.MODELS[model]["spec"]
    batch = result.get("batch_size")
    flops = result.get("flops_per_step")
    if batch:
        amount = "" if not flops else (f"{flops / 1e9:,.2f} GFLOP" if flops >= 1e9 else f"{flops / 1e6:,.1f} MFLOP")
        parts.append(f"Model `{model}` (`{spec}`), batch {batch}"
                     + (f", {amount} per training step (`engine plan`)" if flops else "") + ".")
    peak = result.get("gemm_peak")
    if peak:
        parts.append(f"Single-core f32 GEMM peak: best {peak['gflops_per_core_best']:.1f} GFLOP/s "
                     f"(median {peak['gflops_per_core_median']:.1f}; numpy {peak.get('blas') or 'BLAS'}, "
                     f"kernel {peak.get('corename') or '?'}, {peak['n']}³, pinned to CPU {peak['cpus'][0]}). "
                     "GFLOP/s per core = flops per step / wall s per step / threads; % of peak = that / the "
                     "best GEMM figure.")
    after = result.get("gemm_peak_after")
    if peak and after:
        drift = after["gflops_per_core_best"] / peak["gflops_per_core_best"] - 1.0
        parts.append(f"Measured again after the runs: best {after['gflops_per_core_best']:.1f} "
                     f"(median {after['gflops_per_core_median']:.1f}), {drift:+.0%}: how far the machine's "
                     "own speed moved during the comparison.")
    return " ".join(parts)


def markdown(result):
    m = result["machine"]
    head = (f"Machine: {m['cpu_model']}, {m['nproc']} cores ({m['kernel']}); load average before "
            f"{' '.join(f'{x:.2f}' for x in result['loadavg_before'])}, after "
            f"{' '.join(f'{x:.2f}' for x in result['loadavg_after'])}; {quiet_note(result)}. "
            f"{result['date']}, engine at {result['git_revision']}, "
            f"{result['reps']} runs per configuration, interleaved; {result['steps']} timed steps after "
            f"{result['warmup']} warm-up steps. Median (min–max). \"Others' CPU\": cores' worth of busy "
            f"time on the machine during a run that this run's processes did not use (other people's work, "
            f"hypervisor steal).")
    note = workload_note(result)
    if note:
        head += " " + note
    # A column no run has a value for (the arithmetic columns of a file written before they
    # existed, % of peak with --no-gemm-peak) is left out rather than shown as dashes.
    summaries = [result["summary"][str(t)][impl] for t in result["threads"] for impl in ("tf", "engine")]
    metrics = [m for m in METRICS if any(s.get(m[0]) for s in summaries)]
    lines = [
        head,
        "",
        "| configuration | threads | " + " | ".join(t for _, t, _ in metrics) + " | others' CPU (cores) |",
        "|---|---|" + "---|" * len(metrics) + "---|",
    ]
    for threads in result["threads"]:
        s = result["summary"][str(threads)]
        for impl in ("tf", "engine"):
            cells = [fmt(s[impl].get(k), d) for k, _, d in metrics]
            lines.append(f"| {NAMES[impl]} | {threads} | " + " | ".join(cells)
                         + f" | {fmt(s[impl].get('others_cpu_cores'), 2)} |")
        ratio = s["ratio_engine_over_tf"]
        cells = ["-" if ratio.get(k) is None else f"{ratio[k]:.2f}×" for k, _, _ in metrics]
        lines.append(f"| **engine / TF** | {threads} | " + " | ".join(cells) + " | |")
    lines += ["", f"Commands: `{result['compare_command']}` runs, for each `--threads` N,", ""]
    for impl, cmd in result["commands"].items():
        if impl != "gemm_peak":
            lines.append(f"- {NAMES[impl]}: `{' '.join(cmd)}`")
    if "gemm_peak" in result["commands"]:
        when = "before and after the runs" if result.get("gemm_peak_after") else "once, before the runs"
        lines.append(f"- {when}, the GEMM peak: `{' '.join(result['commands']['gemm_peak'])}`")
    return "\n".join(lines) + "\n"


def rel(cmd):
    """The command as typed from the repository root."""
    out = []
    for c in cmd:
        if c == sys.executable:
            c = "python3"
        elif os.path.isabs(c) and c.startswith(REPO + os.sep):
            c = os.path.relpath(c, REPO)
        out.append(c)
    return out


def main(argv=None, invoked_as="bench/compare.py"):
    who = os.path.splitext(os.path.basename(invoked_as))[0]
    args = parse_args(argv, who + ".py")
    args.who = who
    args.compare_command = " ".join(["python3", invoked_as] + sys.argv[1:])  # as the user typed it
    name = f"{args.model}_compare"
    if args.render:
        path = os.path.join(args.out, name + ".json")
        try:
            with open(path) as f:
                result = json.load(f)
        except (OSError, ValueError) as e:
            raise BenchError(f"{path}: cannot read it ({e})") from None
        write_markdown(args.out, name, result)
        return
    if not os.path.exists(TF_PYTHON):
        raise BenchError(f"{TF_PYTHON}: missing; run bench/setup.sh first")
    spec = _models.spec_path(args.model)
    try:
        facts = _models.spec_facts(spec)
    except _models.SpecError as e:
        raise BenchError(str(e)) from None
    binary, revision = args.engine, f"{args.engine} as found (not rebuilt; working tree at {git_revision()})"
    if args.rev is not None:
        binary, revision = build(args.rev, who)
    elif not args.no_build:
        binary, revision = build(None, who)
    if not os.path.isfile(binary):
        raise BenchError(f"{binary}: not found; build it with `cargo build --release -p engine-cli`")
    # The target dir is shared: someone's build may replace the binary halfway through the
    # runs. A private copy keeps every run on the binary that was just built.
    private = tempfile.mkdtemp(prefix=name + "_")
    try:
        engine = os.path.join(private, "engine")
        shutil.copy2(binary, engine)
        flops = plan_flops(engine, spec, facts["batch_size"])
        run_all(args, engine, revision, binary, name, facts, flops)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def measure_peak(args):
    busy = wait_quiet(args.wait_quiet, who=args.who) if args.wait_quiet > 0 else None
    print(f"{args.who}: single-core GEMM peak (load average {os.getloadavg()[0]:.2f})", file=sys.stderr)
    peak = run_one(gemm_command(), args.timeout)
    peak["busy_before_run"] = busy
    print(f"{args.who}:   best {peak['gflops_per_core_best']:.1f} GFLOP/s, median "
          f"{peak['gflops_per_core_median']:.1f}, others' CPU {peak['others_cpu_cores']:.2f} cores", file=sys.stderr)
    return peak


def add_arithmetic(report, flops, threads, peak):
    """Achieved GFLOP/s per core of a run, and as a percentage of the single-core GEMM peak."""
    wall_ms = report.get("wall_ms_per_step")
    if not wall_ms:
        return
    report["flops_per_step"] = flops
    report["gflops_per_core"] = flops / (wall_ms / 1e3) / threads / 1e9
    if peak:
        report["percent_of_peak"] = 100.0 * report["gflops_per_core"] / peak["gflops_per_core_best"]


def run_all(args, engine, revision, binary, name, facts, flops):
    busy = busy_fraction()
    result = {
        "bench": name,
        "model": args.model,
        "spec": _models.MODELS[args.model]["spec"],
        "batch_size": facts["batch_size"],
        "flops_per_step": flops,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_revision": revision,
        "machine": machine(),
        "loadavg_before": list(os.getloadavg()),
        "busy_before": busy,
        "reps": args.reps,
        "steps": args.steps,
        "warmup": args.warmup,
        "log_every": args.log_every,
        "threads": args.threads,
        "compare_command": args.compare_command,
        "commands": {k: rel(v) for k, v in commands(args, "N", binary).items()},
        "runs": [],
    }
    peak = None
    if not args.no_gemm_peak:
        result["commands"]["gemm_peak"] = rel(gemm_command())
        peak = measure_peak(args)
    result["gemm_peak"] = peak
    for rep in range(args.reps):
        for threads in args.threads:
            cmds = commands(args, threads, engine)
            order = ("tf", "engine") if rep % 2 == 0 else ("engine", "tf")
            for impl in order:
                busy = wait_quiet(args.wait_quiet, who=args.who) if args.wait_quiet > 0 else None
                print(f"{args.who}: {args.model}, rep {rep + 1}/{args.reps}, {threads} thread(s), {impl} "
                      f"(load average {os.getloadavg()[0]:.2f})", file=sys.stderr)
                report = run_one(cmds[impl], args.timeout)
                report["busy_before_run"] = busy
                add_arithmetic(report, flops, threads, peak)
                result["runs"].append({"rep": rep, "threads": threads, "impl": impl, "report": report})
                print(f"{args.who}:   {report['examples_per_s']:,.0f} examples/s, "
                      f"{report['wall_ms_per_step']:.2f} ms/step, {report['gflops_per_core']:.1f} GFLOP/s per core, "
                      f"others' CPU {report['others_cpu_cores']:.2f} cores", file=sys.stderr)
    result["loadavg_after"] = list(os.getloadavg())
    # A shared VM's arithmetic can move by half within an hour (bench/results/*_intel*):
    # the peak taken again says how far it moved while the runs were being timed.
    result["gemm_peak_after"] = measure_peak(args) if peak else None
    summary = {}
    for threads in args.threads:
        per = {}
        for impl in ("tf", "engine"):
            reports = [r["report"] for r in result["runs"] if r["threads"] == threads and r["impl"] == impl]
            per[impl] = {k: stats([r.get(k) for r in reports]) for k, _, _ in METRICS + [("others_cpu_cores", "", 0)]}
        ratio = {}
        for k, _, _ in METRICS:
            e, t = per["engine"][k], per["tf"][k]
            ratio[k] = e["median"] / t["median"] if e and t and t["median"] else None
        per["ratio_engine_over_tf"] = ratio
        summary[str(threads)] = per
    result["summary"] = summary
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    write_markdown(args.out, name, result)


def write_markdown(folder, name, result):
    md = markdown(result)
    with open(os.path.join(folder, name + ".md"), "w") as f:
        f.write(md)
    print(md)


def cli(argv=None, invoked_as="bench/compare.py"):
    """Runs main; a BenchError becomes a message without a traceback and exit status 2."""
    try:
        main(argv, invoked_as)
    except BenchError as e:
        print(f"{os.path.splitext(os.path.basename(invoked_as))[0]}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
