#!/usr/bin/env bash
# One lent-GPU session's measurements, as one command of the device tool (issue 36):
# a session gets about 15 minutes of device time, so everything runs from here, each run
# under a time limit, its results written under $OUT as they come (a call cut at its
# limit still returns them: res.tar.xz and summary.txt).
#
#   bench/gpu_session.sh [--budget SECONDS]        (default 480)
#
# It expects bench/.build/gpu/ (git-ignored; carry it) to hold what BENCHMARKS.md's
# "Running on a GPU machine" builds here: engine.xz (wgpu,cuda), and where built,
# engine-tuned.xz (wgpu,cuda,autotune) and engine-fused.xz (wgpu,cuda,fusion); the
# libvulkan1 .deb; and fmnist/ with the Fashion-MNIST files when the machine lacks them.
#
# 1. The builds side by side on the launch-bound row (the tutorial CNN at 64 on cuda:0),
#    with PyTorch eager: steady rate and time to first step of each.
# 2. wgpu:0 started once with the Vulkan loader's errors shown (it found no adapter on
#    the H200 of 2026-11-27).
# 3. bench/gpu_compare.sh with the default build, every row, in the time that is left.
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
for name in engine engine-tuned engine-fused; do
  if [ -f "$G/$name.xz" ]; then
    xz -d -k -f "$G/$name.xz" && chmod +x "$G/$name" && builds+=("$name")
  fi
done
[ ${#builds[@]} -gt 0 ] || { say "no engine binary in $G"; exit 1; }
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1); builds: ${builds[*]}; VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}"

# 1. The builds side by side, and eager, on the tutorial CNN at 64.
timeout -k 5 60 python3 bench/torch_gpu.py --model cnn --mode eager --batch-size 64 >"$R/eager.json" 2>"$R/eager.log"
report() {  # label json
  python3 -c 'import json,sys; r=json.load(open(sys.argv[2])); print(f"{sys.argv[1]}: {r[\"examples_per_s\"]:,.0f} examples/s, first step {r[\"process_start_to_first_step_s\"]:.1f} s")' "$1" "$2" 2>/dev/null \
    || echo "$1: no result (see its log)"
}
say "$(report "PyTorch eager, cnn 64" "$R/eager.json")"
for name in "${builds[@]}"; do
  limit=$(( $(left) / 2 )); [ "$limit" -gt 240 ] && limit=240
  [ "$limit" -lt 30 ] && { say "$name: skipped, $(left) s left"; continue; }
  timeout -k 5 "$limit" python3 bench/engine_cnn.py --engine "$G/$name" --device cuda:0 --batch-size 64 \
    --warmup 100 --steps 1000 --no-cpu-check --log "$R/$name-cnn64.log" \
    --set run_config.save_checkpoints_steps=1000000 >"$R/$name-cnn64.json" 2>>"$R/$name-cnn64.log"
  say "$(report "$name cuda:0, cnn 64" "$R/$name-cnn64.json")"
done

# 2. wgpu:0 once, with the loader's complaints.
VK_LOADER_DEBUG=error,warn timeout -k 5 60 "$G/${builds[0]}" run specs/fashion_mnist_cnn.ron --device wgpu:0 \
  --max-steps 3 --model-dir /tmp/gpu_session_wgpu --set eval_input=None >"$R/wgpu.log" 2>&1
say "wgpu:0 exit $?: $(grep -m1 -E '^error|wgpu:0 is' "$R/wgpu.log")"

# 3. The table, in what is left (the runs under their own limits).
if [ "$(left)" -gt 60 ]; then
  timeout -k 5 "$(left)" bench/gpu_compare.sh --engine "$G/${builds[0]}" --out "$R/table" --limit 90 >/dev/null 2>>"$R/summary.txt"
  python3 bench/gpu_table.py "$R/table" >>"$R/summary.txt" 2>&1
fi
cat "$R/summary.txt"
