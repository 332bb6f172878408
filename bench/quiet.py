"""How busy the machine's CPUs are, and waiting until they are idle.

On 2 shared cores, another person's cargo build halves a benchmark's figures; the load
average lags by a minute, so this samples /proc/stat directly. Standard library only.

    python3 bench/quiet.py                 # prints the busy fraction over 3 s
    python3 bench/quiet.py --wait 600      # waits up to 600 s for under 10 % busy, then prints it
"""

import argparse
import sys
import time


def cpu_jiffies():
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user
    return total - idle, total


def busy_fraction(seconds=3.0):
    b0, t0 = cpu_jiffies()
    time.sleep(seconds)
    b1, t1 = cpu_jiffies()
    return (b1 - b0) / max(t1 - t0, 1)


def wait_quiet(limit_s, threshold=0.10, who="quiet"):
    """Samples 3 s windows until one is under `threshold` busy or `limit_s` has passed;
    returns the last sample's busy fraction."""
    deadline = time.monotonic() + limit_s
    while True:
        busy = busy_fraction()
        if busy < threshold or time.monotonic() >= deadline:
            return busy
        print(f"{who}: CPUs {busy:.0%} busy; waiting for a quiet machine", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                   help="wait up to SECONDS for the CPUs to be under 10%% busy over 3 s")
    a = p.parse_args()
    busy = wait_quiet(a.wait) if a.wait > 0 else busy_fraction()
    print(f"{busy:.3f}")


if __name__ == "__main__":
    main()
