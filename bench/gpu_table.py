"""The table of bench/gpu_compare.sh: one row per model and batch, median examples/s of
each runner over its repetitions (with the range), the time from process start to the
end of the first step, and the engine's best backend over PyTorch eager and torch.compile.

    python3 bench/gpu_table.py DIR      # the <model>-<batch>-<runner>-<rep>.json files of a run
"""

import glob
import json
import os
import re
import statistics
import sys

RUNNERS = ["engine-cuda", "engine-wgpu", "torch-eager", "torch-compile"]
NAME = re.compile(r"^(\w+)-(\d+)-(engine-cuda|engine-wgpu|torch-eager|torch-compile)-(\d+)\.json$")


def load(directory):
    """{(model, batch): {runner: [report, ...]}} from the run's JSON files."""
    rows = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        m = NAME.match(os.path.basename(path))
        if not m:
            continue
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, ValueError):
            continue
        key = (m.group(1), int(m.group(2)))
        rows.setdefault(key, {}).setdefault(m.group(3), []).append(report)
    return rows


def rate(reports):
    values = sorted(r["examples_per_s"] for r in reports)
    return statistics.median(values), values


def cell(reports):
    if not reports:
        return "—"
    median, values = rate(reports)
    text = f"{median:,.0f}"
    if len(values) > 1:
        text += f" ({values[0]:,.0f}–{values[-1]:,.0f})"
    return text


def first_step(reports):
    if not reports:
        return "—"
    return f"{statistics.median(r['process_start_to_first_step_s'] for r in reports):.1f}"


def ratio(engine, peer):
    if not engine or not peer:
        return "—"
    return f"{engine / peer:.2f}×"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_table.py DIR")
    rows = load(sys.argv[1])
    if not rows:
        sys.exit(f"{sys.argv[1]}: no reports")
    device = next((r["device"] for runs in rows.values() for r in runs.get("torch-eager", []) if "device" in r), "")
    if device:
        print(f"GPU: {device}\n")
    print("| model, batch | engine `cuda:0` | engine `wgpu:0` | PyTorch eager | `torch.compile` "
          "| best engine / eager | best engine / compile | first step s (cuda / wgpu / eager / compile) |")
    print("|---|---|---|---|---|---|---|---|")
    for (model, batch), runs in sorted(rows.items()):
        engine = max((rate(runs[r])[0] for r in ("engine-cuda", "engine-wgpu") if runs.get(r)), default=None)
        eager = rate(runs["torch-eager"])[0] if runs.get("torch-eager") else None
        compiled = rate(runs["torch-compile"])[0] if runs.get("torch-compile") else None
        firsts = " / ".join(first_step(runs.get(r)) for r in RUNNERS)
        cells = " | ".join(cell(runs.get(r)) for r in RUNNERS)
        print(f"| {model}, {batch} | {cells} | {ratio(engine, eager)} | {ratio(engine, compiled)} | {firsts} |")


if __name__ == "__main__":
    main()
