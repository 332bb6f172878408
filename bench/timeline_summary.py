"""Where a profiled step's device time goes: the Profiler hook's timeline
(`timeline-<step>.json`), summed per op over its `device` row, largest first.

    python3 bench/timeline_summary.py MODEL_DIR/timeline-21.json [--top 20]

Prints, per op, its device time over the profiled steps (ms per step), its share of
the ops' device time and how many times it ran per step; then the host's time per step
for comparison (on a GPU the host row is the launch, the device row the kernels). A CPU
timeline has no device row: its ops run on the host, and they are ranked by that time.
"""

import argparse
import collections
import json


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timeline")
    p.add_argument("--top", type=int, default=20)
    a = p.parse_args()
    with open(a.timeline) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    steps = {e["args"].get("step") for e in spans} or {0}
    device = collections.defaultdict(lambda: [0.0, 0])
    host = collections.defaultdict(float)
    on_device = any(e.get("cat") == "device" for e in spans)
    for e in spans:
        if e.get("cat") == "op":
            host[e["name"]] += e["dur"]
        if e.get("cat") == ("device" if on_device else "op"):
            device[e["name"]][0] += e["dur"]
            device[e["name"]][1] += 1
    n = len(steps)
    total = sum(v[0] for v in device.values())
    where = "device" if on_device else "host (CPU)"
    print(f"{a.timeline}: {n} profiled step(s); ops' {where} time {total / n / 1e3:.3f} ms per step, "
          f"host time {sum(host.values()) / n / 1e3:.3f} ms per step")
    print(f"{'op':<28} {where + ' ms/step':>14} {'share':>6} {'runs/step':>9} {'host ms/step':>12}")
    for name, (dur, count) in sorted(device.items(), key=lambda kv: -kv[1][0])[:a.top]:
        share = dur / total if total else 0.0
        print(f"{name:<28} {dur / n / 1e3:>14.3f} {share:>6.1%} {count / n:>9.1f} {host[name] / n / 1e3:>12.3f}")


if __name__ == "__main__":
    main()
