"""Engine vs TensorFlow 2.15 Estimator on the tutorial CNN (Fashion-MNIST, batch 64), interleaved.

Builds the engine in release, then runs bench/tf_estimator_cnn.py and bench/engine_cnn.py
alternately (per repetition and thread count: TF then engine, the next repetition engine
then TF) so that slow drifts of the shared machine's load hit both alike. Writes
bench/results/cnn_compare.json (every run's report, the machine, the commands) and
bench/results/cnn_compare.md (the table for BENCHMARKS.md), and prints the table.
Standard library only.

    python3 bench/compare_cnn.py                       # 3 repetitions, 1 and 2 threads, 1000 timed steps
    python3 bench/compare_cnn.py --reps 5 --steps 2000 --wait-quiet 600
"""

import argparse
import datetime
import json
import os
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
from quiet import busy_fraction, cpu_jiffies, wait_quiet  # noqa: E402
TF_PYTHON = os.path.join(HERE, ".venv-tf", "bin", "python")

# (key in a report, column title, digits)
METRICS = [
    ("examples_per_s", "examples/s", 0),
    ("wall_ms_per_step", "wall ms/step", 2),
    ("cpu_ms_per_step", "CPU ms/step", 2),
    ("process_start_to_first_step_s", "process start → first step (s)", 2),
]


class BenchError(Exception):
    pass


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="runs of each configuration (default 3)")
    p.add_argument("--steps", type=int, default=1000, help="timed steps (default 1000)")
    p.add_argument("--warmup", type=int, default=100, help="untimed steps first (default 100)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    p.add_argument("--engine", default=os.path.join(REPO, "target", "release", "engine"))
    p.add_argument("--no-build", action="store_true", help="use the engine binary as it is")
    p.add_argument("--rev", default=None,
                   help="build this committed revision instead of the working tree: `git archive` into "
                        "bench/.build/src, target dir bench/.build/target (the first build there is a full one)")
    p.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                   help="before each run, wait up to SECONDS for the CPUs to be idle (under 10%% busy over 3 s); "
                        "other people's builds on a 2-core machine distort the figures badly")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per run (default 600)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="folder for cnn_compare.{json,md}")
    p.add_argument("--render", action="store_true",
                   help="only rewrite cnn_compare.md from the folder's cnn_compare.json and print it")
    a = p.parse_args()
    if a.reps < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--reps and --steps must be >= 1, --warmup >= 0")
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


def build(rev):
    """Builds the engine; returns (binary, what was built)."""
    cmd = ["cargo", "build", "--release", "-p", "engine-cli"]
    if rev is None:
        print(f"compare_cnn: {' '.join(cmd)}", file=sys.stderr)
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
    print(f"compare_cnn: {' '.join(cmd)} at {full[:12]} in {src}", file=sys.stderr)
    r = subprocess.run(cmd, cwd=src, env=env)
    if r.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` at {full[:12]} failed with status {r.returncode}")
    return os.path.join(build_dir, "target", "release", "engine"), full[:12]


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
    common = ["--threads", str(threads), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    return {
        "tf": [TF_PYTHON, os.path.join(HERE, "tf_estimator_cnn.py")] + common,
        "engine": [sys.executable, os.path.join(HERE, "engine_cnn.py"), "--engine", engine or args.engine] + common,
    }


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


NAMES = {"tf": "TF 2.15 Estimator", "engine": "engine"}


def quiet_note(result):
    waited = [r["report"].get("busy_before_run") for r in result["runs"]]
    if waited and all(b is not None for b in waited):
        return (f"each run began once the CPUs were under 10 % busy over 3 s (at most "
                f"{max(waited):.0%})")
    return f"CPUs {result['busy_before']:.0%} busy in the 3 s before the first run"


def markdown(result):
    m = result["machine"]
    lines = [
        f"Machine: {m['cpu_model']}, {m['nproc']} cores ({m['kernel']}); load average before "
        f"{' '.join(f'{x:.2f}' for x in result['loadavg_before'])}, after "
        f"{' '.join(f'{x:.2f}' for x in result['loadavg_after'])}; {quiet_note(result)}. "
        f"{result['date']}, engine at {result['git_revision']}, "
        f"{result['reps']} runs per configuration, interleaved; {result['steps']} timed steps after "
        f"{result['warmup']} warm-up steps. Median (min–max). \"Others' CPU\": cores' worth of busy "
        f"time on the machine during a run that this run's processes did not use (other people's work, "
        f"hypervisor steal).",
        "",
        "| configuration | threads | " + " | ".join(t for _, t, _ in METRICS) + " | others' CPU (cores) |",
        "|---|---|" + "---|" * len(METRICS) + "---|",
    ]
    for threads in result["threads"]:
        s = result["summary"][str(threads)]
        for impl in ("tf", "engine"):
            cells = [fmt(s[impl].get(k), d) for k, _, d in METRICS]
            lines.append(f"| {NAMES[impl]} | {threads} | " + " | ".join(cells)
                         + f" | {fmt(s[impl].get('others_cpu_cores'), 2)} |")
        ratio = s["ratio_engine_over_tf"]
        cells = ["-" if ratio.get(k) is None else f"{ratio[k]:.2f}×" for k, _, _ in METRICS]
        lines.append(f"| **engine / TF** | {threads} | " + " | ".join(cells) + " | |")
    lines += ["", f"Commands: `{result['compare_command']}` runs, for each `--threads` N,", ""]
    for impl, cmd in result["commands"].items():
        lines.append(f"- {NAMES[impl]}: `{' '.join(cmd)}`")
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


def main():
    args = parse_args()
    if args.render:
        path = os.path.join(args.out, "cnn_compare.json")
        try:
            with open(path) as f:
                result = json.load(f)
        except (OSError, ValueError) as e:
            raise BenchError(f"{path}: cannot read it ({e})") from None
        write_markdown(args.out, result)
        return
    if not os.path.exists(TF_PYTHON):
        raise BenchError(f"{TF_PYTHON}: missing; run bench/setup.sh first")
    binary, revision = args.engine, f"{args.engine} as found (not rebuilt; working tree at {git_revision()})"
    if args.rev is not None:
        binary, revision = build(args.rev)
    elif not args.no_build:
        binary, revision = build(None)
    if not os.path.isfile(binary):
        raise BenchError(f"{binary}: not found; build it with `cargo build --release -p engine-cli`")
    # The target dir is shared: someone's build may replace the binary halfway through the
    # runs. A private copy keeps every run on the binary that was just built.
    private = tempfile.mkdtemp(prefix="compare_cnn_")
    try:
        engine = os.path.join(private, "engine")
        shutil.copy2(binary, engine)
        run_all(args, engine, revision, binary)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def run_all(args, engine, revision, binary):
    busy = busy_fraction()
    result = {
        "bench": "cnn_compare",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_revision": revision,
        "machine": machine(),
        "loadavg_before": list(os.getloadavg()),
        "busy_before": busy,
        "reps": args.reps,
        "steps": args.steps,
        "warmup": args.warmup,
        "threads": args.threads,
        "compare_command": " ".join(["python3", "bench/compare_cnn.py"] + sys.argv[1:]),
        "commands": {k: rel(v) for k, v in commands(args, "N", binary).items()},
        "runs": [],
    }
    for rep in range(args.reps):
        for threads in args.threads:
            cmds = commands(args, threads, engine)
            order = ("tf", "engine") if rep % 2 == 0 else ("engine", "tf")
            for impl in order:
                busy = wait_quiet(args.wait_quiet, who="compare_cnn") if args.wait_quiet > 0 else None
                print(f"compare_cnn: rep {rep + 1}/{args.reps}, {threads} thread(s), {impl} "
                      f"(load average {os.getloadavg()[0]:.2f})", file=sys.stderr)
                report = run_one(cmds[impl], args.timeout)
                report["busy_before_run"] = busy
                result["runs"].append({"rep": rep, "threads": threads, "impl": impl, "report": report})
                print(f"compare_cnn:   {report['examples_per_s']:,.0f} examples/s, "
                      f"{report['wall_ms_per_step']:.2f} ms/step, others' CPU {report['others_cpu_cores']:.2f} cores",
                      file=sys.stderr)
    result["loadavg_after"] = list(os.getloadavg())
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
    with open(os.path.join(args.out, "cnn_compare.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    write_markdown(args.out, result)


def write_markdown(folder, result):
    md = markdown(result)
    with open(os.path.join(folder, "cnn_compare.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"compare_cnn: {e}", file=sys.stderr)
        sys.exit(2)
