#!/usr/bin/env python3
"""Print what TensorBoard reads from a directory of event files, as JSON.

Uses TensorBoard's own `EventAccumulator` (the loader behind its dashboards), so a test comparing this
output with what the engine wrote proves that TensorBoard shows our summaries. Scalars and histograms
of every tag, all events kept (no sampling), text summaries (the Text dashboard), the graph (the Graphs tab's nodes) and the run's hyperparameters (the HParams
dashboard's session start).

usage: read_events.py DIR
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import (
    HISTOGRAMS,
    SCALARS,
    TENSORS,
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


def hparams_of(accumulator):
    """The HParams dashboard's view of the run: its session_start_info's values, decoded
    with TensorBoard's own protos; None when the files hold none."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    try:
        content = accumulator.PluginTagToContent("hparams").get("_hparams_/session_start_info")
    except KeyError:
        return None
    if content is None:
        return None
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    out = {}
    for name, value in data.session_start_info.hparams.items():
        kind = value.WhichOneof("kind")
        out[name] = getattr(value, kind) if kind else None
    return out


def texts_of(accumulator):
    """The Text dashboard's view: every text tag's strings by step."""
    try:
        tags = accumulator.PluginTagToContent("text")
    except KeyError:
        return {}
    return {
        tag: [[event.step, event.tensor_proto.string_val[0].decode()] for event in accumulator.Tensors(tag)]
        for tag in tags
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    accumulator = EventAccumulator(sys.argv[1], size_guidance={SCALARS: 0, HISTOGRAMS: 0, TENSORS: 0})
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
        "hparams": hparams_of(accumulator),
        "texts": texts_of(accumulator),
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
