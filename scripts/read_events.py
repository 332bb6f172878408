#!/usr/bin/env python3
"""Print what TensorBoard reads from a directory of event files, as JSON.

Uses TensorBoard's own `EventAccumulator` (the loader behind its dashboards), so a test comparing this
output with what the engine wrote proves that TensorBoard shows our summaries. Scalars and histograms
of every tag, all events kept (no sampling), and the graph (the Graphs tab's nodes).

usage: read_events.py DIR
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import (
    HISTOGRAMS,
    SCALARS,
    EventAccumulator,
)


def graph_of(accumulator):
    """The Graphs tab's view: every node with its op, inputs, device and output shapes; None
    when the files hold no graph."""
    try:
        graph = accumulator.Graph()
    except ValueError:
        return None
    return [
        {
            "name": node.name,
            "op": node.op,
            "input": list(node.input),
            "device": node.device,
            "shapes": [[d.size for d in s.dim] for s in node.attr["_output_shapes"].list.shape],
        }
        for node in graph.node
    ]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    accumulator = EventAccumulator(sys.argv[1], size_guidance={SCALARS: 0, HISTOGRAMS: 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    out = {
        "scalars": {
            tag: [[event.step, event.value] for event in accumulator.Scalars(tag)]
            for tag in tags.get(SCALARS, [])
        },
        "histograms": {
            tag: [
                {
                    "step": event.step,
                    "min": event.histogram_value.min,
                    "max": event.histogram_value.max,
                    "num": event.histogram_value.num,
                    "sum": event.histogram_value.sum,
                    "sum_squares": event.histogram_value.sum_squares,
                    "bucket_limit": list(event.histogram_value.bucket_limit),
                    "bucket": list(event.histogram_value.bucket),
                }
                for event in accumulator.Histograms(tag)
            ]
            for tag in tags.get(HISTOGRAMS, [])
        },
        "file_version": accumulator.file_version,
        "graph": graph_of(accumulator),
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
