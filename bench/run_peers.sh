#!/usr/bin/env bash
# Runs every peer benchmark once and writes bench/results/*.json, then prints a
# Markdown summary (bench/summarize.py). Peers run one after another so that
# none competes with another for the 2 cores; run it on a quiet machine, the
# JSON files record the load average at start and end of each run.
#
#   bench/run_peers.sh                 # timing runs (a few hundred steps each)
#   EVAL=1 bench/run_peers.sh          # also 2814 steps + test accuracy
#   STEPS=500 WARMUP=50 bench/run_peers.sh
#   WAIT_QUIET=600 bench/run_peers.sh  # before each run, wait up to 600 s for idle CPUs
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
steps="${STEPS:-300}"
warmup="${WARMUP:-50}"
results="$here/results"
mkdir -p "$results"

bash "$here/setup.sh" >&2
tf="$here/.venv-tf/bin/python"
torch="$here/.venv-torch/bin/python"

run() {
    local name="$1"; shift
    if [[ "${WAIT_QUIET:-0}" != 0 ]]; then
        python3 -B "$here/quiet.py" --wait "$WAIT_QUIET" > /dev/null
    fi
    echo "run_peers: $name (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    "$@" > "$results/$name.json.tmp"
    mv "$results/$name.json.tmp" "$results/$name.json"
}

run tf_estimator_cnn_t1 "$tf" "$here/tf_estimator_cnn.py" --threads 1 --steps "$steps" --warmup "$warmup"
run tf_estimator_cnn_t2 "$tf" "$here/tf_estimator_cnn.py" --threads 2 --steps "$steps" --warmup "$warmup"
run tf_mwms_estimator_w1 "$tf" "$here/tf_mwms_estimator.py" --workers 1 --steps "$steps" --warmup "$warmup"
run tf_mwms_estimator_w2 "$tf" "$here/tf_mwms_estimator.py" --workers 2 --steps "$steps" --warmup "$warmup"
run torch_gloo_allreduce "$torch" "$here/torch_gloo_allreduce.py"
if [[ "${EVAL:-0}" == 1 ]]; then
    run tf_estimator_cnn_eval "$tf" "$here/tf_estimator_cnn.py" --eval
fi

python3 "$here/summarize.py" "$results"
