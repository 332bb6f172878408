#!/usr/bin/env bash
# Trains every spec in specs/ a few steps on the CPU and on DEVICE with one engine binary
# and prints their losses side by side: the check that a device runs every plan and
# agrees with the CPU kernels. Not a benchmark (lavapipe is Vulkan on the CPU); on a GPU
# machine it is the first thing to run with a carried binary.
#
#   bench/device_specs.sh [--engine BIN] [--device wgpu:0] [--steps 6] [-- extra engine run args]
#
# Each run writes its log to $OUT (default /tmp/device_specs); lavapipe is selected by
# VK_ICD_FILENAMES when no other Vulkan driver is installed.
set -uo pipefail
cd "$(dirname "$0")/.."
engine=target/release/engine device=wgpu:0 steps=6 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) engine=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--engine BIN] [--device D] [--steps N] [-- ARGS]" >&2; exit 2 ;;
  esac
done
out=${OUT:-/tmp/device_specs}
mkdir -p "$out"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
failed=0
printf '%-10s %-8s %4s %8s  %-12s %-12s %s\n' spec device exit seconds "loss@step2" "loss@step4" "eval"
for spec in specs/*.ron; do
  name=$(basename "$spec" .ron); name=${name#fashion_mnist_}
  for d in cpu "$device"; do
    dir="$out/$name-${d//[:,]/_}"
    rm -rf "$dir"
    start=$(date +%s.%N)
    "$engine" run "$spec" --device "$d" --max-steps "$steps" --model-dir "$dir" \
      --set run_config.log_step_count_steps=2 --set eval_spec.steps=1 "${extra[@]}" >"$dir.log" 2>&1
    rc=$?
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    loss() { grep -o "loss = [0-9.e+-]*, step = $1 " "$dir.log" | head -1 | cut -d' ' -f3 | tr -d ,; }
    eval_loss=$(grep -o "Saving dict for global step.*" "$dir.log" | head -1 | grep -o "loss = [0-9.e+-]*" | cut -d' ' -f3)
    printf '%-10s %-8s %4s %8.1f  %-12s %-12s %s\n' "$name" "$d" "$rc" "$secs" "$(loss 2)" "$(loss 4)" "$eval_loss"
    if [ "$rc" -ne 0 ]; then
      failed=1
      grep -E "^error|panicked" "$dir.log" | head -3 | sed 's/^/    /'
    fi
  done
done
exit $failed
