#!/usr/bin/env python3
"""Print a safetensors checkpoint as JSON, read with Python's own `safetensors.numpy`.

Used by estimator/tests/checkpoint_python.rs to prove that the engine's checkpoints load in the Python
ecosystem: names, dtypes, shapes, every value and the `__metadata__` entries.

usage: read_safetensors.py FILE
"""
import json
import sys

from safetensors import safe_open
from safetensors.numpy import load_file


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    tensors = load_file(path)
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    out = {
        "metadata": metadata,
        "tensors": {
            name: {
                "dtype": str(array.dtype),
                "shape": list(array.shape),
                "values": array.reshape(-1).tolist(),
            }
            for name, array in sorted(tensors.items())
        },
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
