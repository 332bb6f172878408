#!/usr/bin/env bash
# Creates the two peer virtualenvs used by the benchmarks in bench/.
#   bench/.venv-tf     tensorflow-cpu 2.15 (Estimator, MultiWorkerMirroredStrategy)
#   bench/.venv-torch  CPU-only torch (gloo all_reduce)
# Idempotent: an existing venv whose package already imports is left alone.
# PYTHON overrides the interpreter (default python3; TF 2.15 supports 3.9-3.11).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"

make_venv() {
    local dir="$1"
    if [[ ! -x "$dir/bin/python" ]]; then
        echo "setup: creating $dir" >&2
        "$py" -m venv "$dir"
        "$dir/bin/python" -m pip install --quiet --upgrade pip
    fi
}

# TensorFlow. numpy<2 because TF 2.15 was built against numpy 1.x.
tf="$here/.venv-tf"
make_venv "$tf"
if TF_CPP_MIN_LOG_LEVEL=2 "$tf/bin/python" -c 'import tensorflow as t, sys; sys.exit(0 if t.__version__.startswith("2.15.") else 1)' 2>/dev/null; then
    echo "setup: $tf already has tensorflow 2.15" >&2
else
    "$tf/bin/python" -m pip install --quiet 'tensorflow-cpu==2.15.*' 'numpy<2'
fi

# PyTorch. The CPU-only wheel index is used when it answers; otherwise plain
# PyPI (whose Linux x86_64 torch wheel also runs on CPU, it is just larger).
torch_venv="$here/.venv-torch"
make_venv "$torch_venv"
if "$torch_venv/bin/python" -c 'import torch, torch.distributed as d, sys; sys.exit(0 if d.is_gloo_available() else 1)' 2>/dev/null; then
    echo "setup: $torch_venv already has torch with gloo" >&2
else
    cpu_index="https://download.pytorch.org/whl/cpu"
    if "$torch_venv/bin/python" - "$cpu_index" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=5)
PY
    then
        "$torch_venv/bin/python" -m pip install --quiet torch numpy --index-url "$cpu_index"
    else
        echo "setup: CPU wheel index unreachable, installing torch from PyPI" >&2
        "$torch_venv/bin/python" -m pip install --quiet torch numpy
    fi
fi

TF_CPP_MIN_LOG_LEVEL=2 "$tf/bin/python" -c 'import tensorflow as t; print("setup: tensorflow", t.__version__)'
"$torch_venv/bin/python" -c 'import torch; print("setup: torch", torch.__version__)'
