"""Peer benchmark: PyTorch gloo all_reduce between N processes on 127.0.0.1.

For float32 tensors of each size, every rank times each all_reduce (SUM); the
reported latency is the median over iterations of the slower rank's time, and
bus bandwidth is 2(n-1)/n * bytes / latency (NCCL-tests' definition, so that
it is comparable across world sizes). Prints one JSON object on stdout.

    bench/.venv-torch/bin/python bench/torch_gloo_allreduce.py
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

DEFAULT_SIZES = ["4KiB", "64KiB", "1MiB", "16MiB", "64MiB"]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text):
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit):
            number = text[: -len(unit)]
            try:
                value = int(number) * UNITS[unit]
            except ValueError:
                break
            if value < 4 or value % 4:
                raise argparse.ArgumentTypeError(f"{text}: must be a positive multiple of 4 bytes (float32)")
            return value
    raise argparse.ArgumentTypeError(f"{text}: expected a size such as 4KiB, 16MiB")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, world, port, sizes, min_iters, budget_s, warmup, out_queue):
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        results = []
        for nbytes in sizes:
            t = torch.ones(nbytes // 4, dtype=torch.float32)
            for _ in range(warmup):
                dist.all_reduce(t)
            # Iteration count: at least min_iters, more for small sizes up to the
            # time budget; rank 0 decides from the warm-up so both ranks agree.
            t0 = time.perf_counter()
            dist.all_reduce(t)
            probe = time.perf_counter() - t0
            n = torch.tensor([max(min_iters, min(10000, int(budget_s / max(probe, 1e-6))))], dtype=torch.int64)
            dist.broadcast(n, src=0)
            times = []
            for _ in range(int(n.item())):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                times.append(time.perf_counter() - t0)
            # Slower rank per iteration: an all_reduce is done when both are done.
            per_iter = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(per_iter, op=dist.ReduceOp.MAX)
            if rank == 0:
                med = statistics.median(per_iter.tolist())
                results.append(
                    {
                        "bytes": nbytes,
                        "iters": int(n.item()),
                        "median_latency_us": med * 1e6,
                        "min_latency_us": min(per_iter.tolist()) * 1e6,
                        "algbw_GBps": nbytes / med / 1e9,
                        "busbw_GBps": 2 * (world - 1) / world * nbytes / med / 1e9,
                    }
                )
        if rank == 0:
            out_queue.put(results)
    finally:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--sizes", nargs="+", type=parse_size, default=[parse_size(s) for s in DEFAULT_SIZES])
    p.add_argument("--min-iters", type=int, default=20)
    p.add_argument("--budget-s", type=float, default=1.0, help="target seconds of timed iterations per size")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process (default 1)")
    a = p.parse_args()
    if a.world_size < 2 or a.min_iters < 1 or a.warmup < 0:
        p.error("--world-size must be >= 2, --min-iters >= 1, --warmup >= 0")

    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    load_start = list(os.getloadavg())
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_gloo_available():
        print("torch_gloo_allreduce: this torch build has no gloo backend", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(a.threads)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=run_rank, args=(r, a.world_size, port, a.sizes, a.min_iters, a.budget_s, a.warmup, queue))
        for r in range(a.world_size)
    ]
    for proc in procs:
        proc.start()
    try:
        results = queue.get(timeout=600)
    except Exception:
        results = None
    for proc in procs:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()
    failed = [i for i, proc in enumerate(procs) if proc.exitcode != 0]
    if results is None or failed:
        print(f"torch_gloo_allreduce: ranks {failed} failed (exit codes "
              f"{[proc.exitcode for proc in procs]})", file=sys.stderr)
        sys.exit(1)
    report = {
        "bench": "torch_gloo_allreduce",
        "torch": torch.__version__,
        "world_size": a.world_size,
        "threads_per_process": a.threads,
        "dtype": "float32",
        "op": "sum",
        "sizes": results,
        "nproc": os.cpu_count(),
        "loadavg_start": load_start,
        "loadavg_end": list(os.getloadavg()),
    }
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
