#!/usr/bin/env bash
# One lent-GPU session's measurements, as one command of the device tool (issue 36):
# a session gets about 15 minutes of device time, so everything runs from here, each run
# under a time limit, its results written under $OUT as they come (a call cut at its
# limit still returns them: res.tar.xz and summary.txt).
#
#   bench/gpu_session.sh [--budget SECONDS]        (default 480)
#
# It expects bench/.build/gpu/ (git-ignored; carry it) to hold what BENCHMARKS.md's
# "Running on a GPU machine" builds here: engine.xz (wgpu,cuda), and any other
# engine-NAME.xz to put beside it (engine-tuned.xz from wgpu,cuda,autotune, engine-fused.xz
# from wgpu,cuda,fusion, the build before a change); the libvulkan1 .deb; and fmnist/ with
# the Fashion-MNIST files when the machine lacks them. `engine` gives the per-op
# profile.
#
# 1. The builds side by side on the launch-bound row (the tutorial CNN at 64 on cuda:0),
#    with PyTorch eager: steady rate, time to first step and device reads of each; then
#    `engine` with ENGINE_CONV_KERNELS=direct (burn's convolution kernels throughout).
# 2. wgpu:0 started once with the Vulkan loader's errors shown (it found no adapter on
#    the H200 of 2026-11-27); where it starts, the CNN at 64 at two submission sizes.
# 3. One step's per-op device profile (the CNN at 512, the default build).
# 4. bench/gpu_compare.sh with the fastest build against eager, every row, then
#    torch.compile on the CNN at 64.
# 5. Where time is left, the per-op profiles of the residual model and VGG.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=480
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    *) echo "usage: $0 [--budget SECONDS]" >&2; exit 2 ;;
  esac
done
G=bench/.build/gpu
OUT=${OUT:-/tmp/gpu_session}
R=/tmp/gpu_session_results
rm -rf "$R" && mkdir -p "$R" "$OUT"
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
say() { echo "$*" | tee -a "$R/summary.txt" >&2; }
finish() {
  cp "$R/summary.txt" "$OUT/" 2>/dev/null
  tar -C "$(dirname "$R")" -cJf "$OUT/res.tar.xz" "$(basename "$R")" 2>/dev/null
}
trap finish EXIT

for deb in "$G"/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" /; done
ldconfig 2>/dev/null
data=/usr/share/datasets/fashion-mnist
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ -d "$G/fmnist" ]; then
  mkdir -p "$data" && cp "$G"/fmnist/* "$data/"
fi
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
  if [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd; break; fi
done
builds=()
for packed in "$G"/engine*.xz; do
  [ -f "$packed" ] || continue
  name=$(basename "$packed" .xz)
  xz -d -k -f "$packed" || continue
  chmod +x "$G/$name"
  if [ "$name" = engine ]; then builds=("$name" "${builds[@]}"); else builds+=("$name"); fi
done
[ ${#builds[@]} -gt 0 ] || { say "no engine binary in $G"; exit 1; }
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1); builds: ${builds[*]}; VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}"

# 1. The builds side by side, and eager, on the tutorial CNN at 64; the fastest build
#    measures the rest.
timeout -k 5 60 python3 bench/torch_gpu.py --model cnn --mode eager --batch-size 64 >"$R/eager.json" 2>"$R/eager.log"
rate() { python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["examples_per_s"]))' "$1" 2>/dev/null || echo 0; }
report() {  # label json
  python3 - "$1" "$2" <<'PY' 2>/dev/null || echo "$1: no result (see its log)"
import json, sys
r = json.load(open(sys.argv[2]))
print(f"{sys.argv[1]}: {r['examples_per_s']:,.0f} examples/s, first step {r['process_start_to_first_step_s']:.1f} s")
PY
}
say "$(report "PyTorch eager, cnn 64" "$R/eager.json")"
best=${builds[0]} best_rate=0
for name in "${builds[@]}"; do
  limit=$(( $(left) / 3 )); [ "$limit" -gt 120 ] && limit=120
  [ "$limit" -lt 30 ] && { say "$name: skipped, $(left) s left"; continue; }
  timeout -k 5 "$limit" python3 bench/engine_cnn.py --engine "$G/$name" --device cuda:0 --batch-size 64 \
    --warmup 100 --steps 1000 --no-cpu-check --log "$R/$name-cnn64.log" \
    --set run_config.save_checkpoints_steps=1000000 >"$R/$name-cnn64.json" 2>>"$R/$name-cnn64.log"
  say "$(report "$name cuda:0, cnn 64" "$R/$name-cnn64.json") [$(grep -o 'device reads: [^,)]*' "$R/$name-cnn64.log" | tail -1)]"
  r=$(rate "$R/$name-cnn64.json"); [ "$r" -gt "$best_rate" ] && { best=$name; best_rate=$r; }
done
say "fastest build on cnn 64: $best"
# The same binary with burn's direct convolution kernels everywhere (before 6ab0a70's GEMMs).
if [ "$(left)" -gt 200 ]; then
  ENGINE_CONV_KERNELS=direct timeout -k 5 60 python3 bench/engine_cnn.py --engine "$G/${builds[0]}" --device cuda:0 \
    --batch-size 64 --warmup 100 --steps 1000 --no-cpu-check --log "$R/direct-cnn64.log" \
    --set run_config.save_checkpoints_steps=1000000 >"$R/direct-cnn64.json" 2>>"$R/direct-cnn64.log"
  say "$(report "${builds[0]} cuda:0, cnn 64, ENGINE_CONV_KERNELS=direct" "$R/direct-cnn64.json")"
fi

# 2. wgpu:0 once, with the loader's complaints; where it starts, the CNN at 64 with the
#    default submission size and with a whole step per submission.
VK_LOADER_DEBUG=error,warn timeout -k 5 60 "$G/${builds[0]}" run specs/fashion_mnist_cnn.ron --device wgpu:0 \
  --max-steps 3 --model-dir /tmp/gpu_session_wgpu --set eval_input=None >"$R/wgpu.log" 2>&1
wgpu_rc=$?
say "wgpu:0 exit $wgpu_rc: $(grep -m1 -E '^error|wgpu:0 is' "$R/wgpu.log")"
if [ $wgpu_rc -eq 0 ]; then
  for tasks in 32 4096; do
    [ "$(left)" -gt 120 ] || break
    CUBECL_WGPU_MAX_TASKS=$tasks timeout -k 5 60 python3 bench/engine_cnn.py --engine "$G/$best" --device wgpu:0 \
      --batch-size 64 --warmup 100 --steps 1000 --no-cpu-check --log "$R/wgpu-tasks-$tasks.log" \
      --set run_config.save_checkpoints_steps=1000000 >"$R/wgpu-tasks-$tasks.json" 2>>"$R/wgpu-tasks-$tasks.log"
    say "$(report "$best wgpu:0, cnn 64, CUBECL_WGPU_MAX_TASKS=$tasks" "$R/wgpu-tasks-$tasks.json")"
  done
fi

# 3. One step's per-op device profile (issue 36, item 1), the CNN at 512 on cuda:0.
prof() {  # build label spec batch
  local d=/tmp/gpu_session_prof-$2
  timeout -k 5 60 "$G/$1" run "specs/fashion_mnist_$3.ron" --device cuda:0 --max-steps 23 --model-dir "$d" \
    --set "train_input.batch_size=$4" --set eval_input=None --set run_config.log_step_count_steps=10 \
    --set 'train_spec.hooks=[Profiler(first_step: 20, last_step: 21)]' >"$R/prof-$2.log" 2>&1
  say "== per-op profile, $1 cuda:0, $3 at $4 (exit $?)"
  grep -h "examples/sec\|device reads" "$R/prof-$2.log" | tail -2 >>"$R/summary.txt"
  python3 bench/timeline_summary.py "$d/timeline-21.json" --top 16 >>"$R/summary.txt" 2>&1
  cp "$d/timeline-21.json" "$R/timeline-$2.json" 2>/dev/null
}
[ "$(left)" -gt 150 ] && prof "${builds[0]}" cnn512 cnn 512

# 4. The table in what is left: the fastest build and eager on every row, then
#    torch.compile (and wgpu:0, where it started) on the launch-bound row.
if [ "$(left)" -gt 60 ]; then
  timeout -k 5 "$(( $(left) - 110 ))" bench/gpu_compare.sh --engine "$G/$best" --out "$R/table" --limit 60 \
    --runners engine-cuda,torch-eager >/dev/null 2>>"$R/summary.txt"
  runners=torch-compile; [ $wgpu_rc -eq 0 ] && runners=engine-wgpu,torch-compile
  timeout -k 5 "$(left)" bench/gpu_compare.sh --engine "$G/$best" --out "$R/table" --limit 60 \
    --rows cnn:64 --runners "$runners" >/dev/null 2>>"$R/summary.txt"
  python3 bench/gpu_table.py "$R/table" >>"$R/summary.txt" 2>&1
fi

# 5. Where time is left, the per-op profiles of the larger models.
[ "$(left)" -gt 70 ] && prof "${builds[0]}" res256 residual 256
[ "$(left)" -gt 70 ] && prof "${builds[0]}" vgg128 vgg 128
cat "$R/summary.txt"
