"""Measured f32 GEMM peak of this machine's cores: numpy's OpenBLAS on an N x N x N matmul.

A model's achieved GFLOP/s means little without the rate a tuned kernel reaches on the
same core; the vendor's nominal peak is no guide on a shared VM (clock, steal, the
hypervisor's CPU model). So compare.py runs this once per comparison, pinned like its
1-thread runs, and reports each model's rate as a fraction of it. numpy comes from the
TensorFlow virtualenv (bench/.venv-tf), whose wheel bundles OpenBLAS; OpenBLAS picks its
kernel for the CPU at run time (`corename` in the report). A CPU newer than the OpenBLAS
build gets an older kernel: 0.3.23 runs its Haswell (AVX2) kernel on a Zen 5, half of what
the core does with AVX-512, and some machines' environments force a core
(OPENBLAS_CORETYPE=Haswell on this project's). So where the CPU has AVX-512 (F, CD, BW,
DQ, VL, what OpenBLAS's SkylakeX kernel needs) and OPENBLAS_CORETYPE names no AVX-512
core, the product is also timed with OPENBLAS_CORETYPE=SkylakeX (in a child process:
OpenBLAS reads it when it loads), and the faster kernel is the one reported (both under
`kernels`). Prints one
JSON object on stdout.

    bench/.venv-tf/bin/python bench/gemm_peak.py                  # 1 thread, pinned to the first CPU
    bench/.venv-tf/bin/python bench/gemm_peak.py --threads 2 --reps 10 --n 4096
"""

import argparse
import ctypes
import glob
import json
import os
import statistics
import subprocess
import sys
import time

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class BenchError(Exception):
    """A problem with the inputs or the environment, reported without a traceback."""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1,
                   help="pin to the first N allowed CPUs and give OpenBLAS N threads (default 1)")
    p.add_argument("--n", type=int, default=2048, help="matrix size: an N x N x N product, 2 N^3 flops (default 2048)")
    p.add_argument("--reps", type=int, default=5, help="timed products after one untimed (default 5)")
    a = p.parse_args()
    if a.threads < 1 or a.n < 1 or a.reps < 1:
        p.error("--threads, --n and --reps must be >= 1")
    return a


def pin(threads):
    """Pins this process to the first `threads` allowed CPUs, as the benchmarks' --threads
    does, and sets the BLAS thread counts; must run before numpy is imported (OpenBLAS
    sizes its pool when it loads)."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads > len(allowed):
        raise BenchError(f"--threads {threads} but only {len(allowed)} CPUs are available: {allowed}")
    os.sched_setaffinity(0, set(allowed[:threads]))
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    return allowed[:threads]


def blas_info(np):
    """What numpy was built with, and OpenBLAS's own account of its kernel (best effort:
    None where the library or its symbols are not found)."""
    info = {"numpy": np.__version__, "blas": None, "openblas_config": None, "corename": None}
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["blas"] = f"{deps.get('name')} {deps.get('version')}"
    except Exception:  # older numpy: no mode="dicts"; the figure stands without it
        pass
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*"))
    for lib in libs:
        try:
            handle = ctypes.CDLL(lib)
        except OSError:
            continue
        for key, names in (("openblas_config", ("openblas_get_config64_", "openblas_get_config")),
                           ("corename", ("openblas_get_corename64_", "openblas_get_corename"))):
            for name in names:
                fn = getattr(handle, name, None)
                if fn is not None:
                    fn.restype = ctypes.c_char_p
                    info[key] = fn().decode(errors="replace").strip()
                    break
    return info


# OpenBLAS's core names whose kernels use AVX-512.
WIDE_CORES = {"skylakex", "cooperlake", "sapphirerapids"}

AVX512_FLAGS = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return AVX512_FLAGS <= set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return False


def wide_kernel(args):
    """The report of the same measurement with OpenBLAS's SkylakeX kernel forced, or None
    where that does not apply or fails."""
    if os.environ.get("OPENBLAS_CORETYPE", "").lower() in WIDE_CORES or not has_avx512():
        return None
    env = dict(os.environ, OPENBLAS_CORETYPE="SkylakeX")
    cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(args.threads), "--n", str(args.n),
           "--reps", str(args.reps)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
        return json.loads(out)
    except (subprocess.SubprocessError, json.JSONDecodeError, OSError) as e:
        print(f"gemm_peak: the SkylakeX kernel did not run: {e}", file=sys.stderr)
        return None


def main():
    args = parse_args()
    cpus = pin(args.threads)
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.n, args.n), dtype=np.float32)
    b = rng.standard_normal((args.n, args.n), dtype=np.float32)
    c = np.empty((args.n, args.n), dtype=np.float32)
    flops = 2.0 * args.n ** 3
    np.matmul(a, b, out=c)  # untimed: pages in c, starts OpenBLAS's threads
    seconds = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        seconds.append(time.perf_counter() - t0)
    rates = [flops / s / 1e9 for s in seconds]
    report = {
        "bench": "gemm_peak",
        "what": f"f32 {args.n}x{args.n}x{args.n} numpy.matmul",
        "threads": args.threads,
        "cpus": cpus,
        "n": args.n,
        "reps": args.reps,
        "flops_per_product": flops,
        "seconds": seconds,
        "gflops_best": max(rates),
        "gflops_median": statistics.median(rates),
        "gflops_per_core_best": max(rates) / args.threads,
        "gflops_per_core_median": statistics.median(rates) / args.threads,
        "loadavg": list(os.getloadavg()),
    }
    report.update(blas_info(np))
    wide = wide_kernel(args)
    report["kernels"] = [{k: r.get(k) for k in ("corename", "gflops_best", "gflops_median")}
                         for r in (report, wide) if r is not None]
    if wide is not None and wide["gflops_best"] > report["gflops_best"]:
        wide["kernels"] = report["kernels"]
        report = wide
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"gemm_peak: {e}", file=sys.stderr)
        sys.exit(2)
