#!/usr/bin/env bash
# The engine against PyTorch on one GPU (issue 36, item 6): for each row (model and batch),
# the engine on `cuda:0` and `wgpu:0` (a carried binary, bench/engine_cnn.py), PyTorch
# eager and torch.compile (bench/torch_gpu.py), interleaved row by row (the order reversed
# on every other repetition), then one table (bench/gpu_table.py): examples/s, time from
# process start to the end of the first step, and the engine's best over eager and compile.
#
#   bench/gpu_compare.sh --engine BIN [--rows cnn:64,cnn:512,residual:256,vgg:128,resnet:128]
#                        [--reps 1] [--runners engine-cuda,engine-wgpu,torch-eager,torch-compile]
#                        [--limit S] [--window "WARMUP STEPS EVERY"] [--out DIR] [-- PATH=VALUE ...]
#
# What follows `--` goes to the engine's runs as `--set PATH=VALUE` (a precision, say).
#
# Each run's JSON goes to DIR (default $OUT or /tmp/gpu_compare) as it finishes, so a run
# cut short still leaves the rows it measured; a run that fails leaves its log there and the
# table shows the row without it. Every run has a time limit (--limit S, default 240).
set -uo pipefail
cd "$(dirname "$0")/.."
engine=target/release/engine rows=cnn:64,cnn:512,residual:256,vgg:128,resnet:128 reps=1
runners=engine-cuda,engine-wgpu,torch-eager,torch-compile limit=240 extra=() fixed_window=
out=${OUT:-/tmp/gpu_compare}
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) engine=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --runners) runners=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --window) fixed_window=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 --engine BIN [--rows M:B,..] [--reps N] [--runners R,..] [--limit S] [--out DIR] [-- PATH=VALUE ..]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}

# The timed window per model, as (warm-up steps, timed steps, logging interval): long
# enough to leave the start-up (and autotuning) out, short enough that the whole table
# fits a few minutes of a lent GPU. The loss is read back every interval on both sides.
# `--window` sets one for every row (a smoke test of the script on lavapipe, say).
window() {
  [ -n "$fixed_window" ] && { echo "$fixed_window"; return; }
  case "$1:$2" in
    cnn:64) echo "100 1000 100" ;;
    vgg:*) echo "20 100 20" ;;
    *) echo "50 300 50" ;;
  esac
}

run_one() {  # runner model batch rep
  local runner=$1 model=$2 batch=$3 rep=$4
  read -r warmup steps every <<<"$(window "$model" "$batch")"
  local name="$model-$batch-$runner-$rep" cmd
  case "$runner" in
    engine-cuda|engine-wgpu)
      local dev=cuda:0; [ "$runner" = engine-wgpu ] && dev=wgpu:0
      cmd=(python3 bench/engine_cnn.py --engine "$engine" --device "$dev" --model "$model"
           --batch-size "$batch" --warmup "$warmup" --steps "$steps" --log-every "$every"
           --no-cpu-check --log "$out/$name.log"
           --set run_config.save_checkpoints_steps=1000000)
      for e in "${extra[@]}"; do cmd+=(--set "$e"); done ;;
    torch-eager|torch-compile)
      cmd=(python3 bench/torch_gpu.py --model "$model" --mode "${runner#torch-}" --batch-size "$batch"
           --warmup "$warmup" --steps "$steps" --log-every "$every") ;;
    *) echo "unknown runner $runner" >&2; return 2 ;;
  esac
  local start=$SECONDS
  # -k: the engine answers SIGTERM after the step it is in, which can be long on a device.
  if timeout -k 10 "$limit" "${cmd[@]}" >"$out/$name.json" 2>>"$out/$name.log"; then
    echo "$name: $((SECONDS - start)) s" >&2
  else
    echo "$name: failed or over ${limit} s (log: $out/$name.log)" >&2
    tail -5 "$out/$name.log" | sed 's/^/    /' >&2
    rm -f "$out/$name.json"
  fi
}

IFS=, read -ra row_list <<<"$rows"
IFS=, read -ra runner_list <<<"$runners"
for ((rep = 0; rep < reps; rep++)); do
  order=("${runner_list[@]}")
  if ((rep % 2)); then
    order=(); for ((i = ${#runner_list[@]} - 1; i >= 0; i--)); do order+=("${runner_list[i]}"); done
  fi
  for row in "${row_list[@]}"; do
    for runner in "${order[@]}"; do run_one "$runner" "${row%%:*}" "${row##*:}" "$rep"; done
  done
done
python3 bench/gpu_table.py "$out"
