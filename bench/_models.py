"""The benchmark models: which spec each one is, and the facts the scripts read from it.

compare.py, engine_cnn.py and tf_estimator.py must agree on the batch size, the length of
an `--eval` run and the checkpoint interval, or the two sides of a comparison would train
different workloads. The spec is the one source for those: they are read from its text
here, not repeated in each script. Standard library only (the driver scripts run on any
python3; the TensorFlow script imports it too).
"""

import math
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# name -> spec, and the timing-run lengths (timed steps after warm-up steps) that
# compare.py, tf_estimator.py and engine_cnn.py use by default. A vgg step takes about a
# second on one thread, so it gets a short window (its steps are long enough for the
# window's edges to be precise); the others keep compare_cnn.py's 1000 after 100, except
# residual (8x the tutorial CNN's flops per step), cut so that a 3-repetition,
# 1-and-2-thread comparison stays under about 10 minutes.
MODELS = {
    "cnn": {"spec": "specs/fashion_mnist_cnn.ron", "steps": 1000, "warmup": 100},
    "mlp": {"spec": "specs/fashion_mnist_mlp.ron", "steps": 1000, "warmup": 100},
    "residual": {"spec": "specs/fashion_mnist_residual.ron", "steps": 500, "warmup": 100},
    "vgg": {"spec": "specs/fashion_mnist_vgg.ron", "steps": 30, "warmup": 5},
    "resnet": {"spec": "specs/fashion_mnist_resnet.ron", "steps": 300, "warmup": 50},
    "vit": {"spec": "specs/fashion_mnist_vit.ron", "steps": 300, "warmup": 50},
}


class SpecError(Exception):
    """A spec that is missing or lacks a value the benchmarks need."""


def defaults_text(key):
    """`cnn 1000, mlp 1000, ...`: a per-model default for --help."""
    return ", ".join(f"{name} {m[key]}" for name, m in MODELS.items())


def spec_path(model):
    return os.path.join(REPO, MODELS[model]["spec"])


def model_of_spec(path):
    """The model name whose spec is `path`, else None (a spec of one's own)."""
    real = os.path.realpath(path)
    for name in MODELS:
        if os.path.realpath(spec_path(name)) == real:
            return name
    return None


def _strip_comments(text):
    # RON `//` line comments go; a `//` inside a quoted string (a path) stays.
    out = []
    for line in text.splitlines():
        in_str = False
        for i, ch in enumerate(line):
            if ch == '"' and (i == 0 or line[i - 1] != "\\"):
                in_str = not in_str
            elif not in_str and line.startswith("//", i):
                line = line[:i]
                break
        out.append(line)
    return "\n".join(out)


def _section(text, key):
    """The text of `key: Name( ... )` or `key: ( ... )` up to its matching parenthesis."""
    m = re.search(r"\b" + re.escape(key) + r"\s*:\s*[A-Za-z_]*\s*\(", text)
    if not m:
        return None
    depth, i = 1, m.end()
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return text[m.end():i - 1]


def _int_in(section, key):
    if section is None:
        return None
    m = re.search(r"\b" + re.escape(key) + r"\s*:\s*(\d+)\b", section)
    return int(m.group(1)) if m else None


def spec_facts(path):
    """{batch_size, max_steps, save_checkpoints_steps} from a spec's text.

    batch_size is train_input's, max_steps train_spec's (both required);
    save_checkpoints_steps is run_config's or None (then both frameworks checkpoint
    every 600 s, their common default).
    """
    try:
        with open(path) as f:
            text = _strip_comments(f.read())
    except OSError as e:
        raise SpecError(f"{path}: cannot read the spec ({e.strerror or e})") from None
    facts = {
        "batch_size": _int_in(_section(text, "train_input"), "batch_size"),
        "max_steps": _int_in(_section(text, "train_spec"), "max_steps"),
        "save_checkpoints_steps": _int_in(_section(text, "run_config"), "save_checkpoints_steps"),
    }
    for key, where in (("batch_size", "train_input"), ("max_steps", "train_spec")):
        if not facts[key]:
            raise SpecError(f"{path}: no `{key}: N` (N >= 1) in its {where}")
    return facts


def default_log_every(warmup, steps, cap=100):
    """The largest logging interval <= cap that divides both warmup and steps.

    engine_cnn.py cuts its window at the engine's `step = N` log lines, so the interval
    must divide both ends; 100 (the Estimator's default) whenever it can.
    """
    g = math.gcd(warmup, steps)  # gcd(0, steps) == steps
    return max(d for d in range(1, min(g, cap) + 1) if g % d == 0)
