#!/usr/bin/env bash
# One lent-GPU session's measurements, as one command of the device tool (issue 36):
# a session gets about 15 minutes of device time, so everything runs from here, each run
# under a time limit, its results written under $OUT as they come (a call cut at its
# limit still returns them: res.tar.xz and summary.txt).
#
#   bench/gpu_session.sh [--budget SECONDS] [--skip conv,patches,precision,wgpu,profile]   (default 480)
#
# --skip leaves parts out where the session's minutes are better spent on the table:
# `conv` the convolution forms of step 1, `patches` the patch-matrix builders of step 1,
# `precision` mixed precision's rows and accuracy run of step 1,
# `wgpu` step 2, `profile` steps 3 and 5.
#
# It expects bench/.build/gpu/ (git-ignored; carry it) to hold what BENCHMARKS.md's
# "Running on a GPU machine" builds here: engine.xz (wgpu,cuda), and any other
# engine-NAME.xz to put beside it (engine-tuned.xz from wgpu,cuda,autotune, engine-fused.xz
# from wgpu,cuda,fusion, the build before a change); the libvulkan1 .deb; and fmnist/ with
# the Fashion-MNIST files when the machine lacks them. `engine` gives the per-op
# profile.
#
# 1. The builds side by side on the launch-bound row (the tutorial CNN at 64 on cuda:0),
#    with PyTorch eager, and on the residual model at 256: steady rate, time to first step
#    and device reads of each; then the fastest build's default (each convolution pass's
#    form measured at the first step) against ENGINE_CONV_KERNELS=rules, =implicit and
#    =gemm on the rows with large convolutions, with the forms measured,
#    ENGINE_CONV_PATCHES=ops (the patch matrices from burn's slices and copies, as
#    before 32b8c78) against the default's one patch kernel, and ENGINE_ELEMENTWISE=ops
#    (each fused elementwise program's instructions one kernel each) against the default's
#    one generated kernel per program, and ENGINE_PIPELINE=off (one step at a time)
#    against the default's step ahead on the CNN at 64 and the residual model;
#    run_config.precision: Bf16Mixed against f32, and the tutorial CNN's 2814 steps in
#    Bf16Mixed (issue 36 wants 0.86 accuracy in every precision).
# 2. wgpu:0 started once with the Vulkan loader's errors shown (it found no adapter on
#    the H200 of 2026-11-27); where it starts, the CNN at 64 at two submission sizes.
# 3. One step's per-op device profile (the CNN at 512 and at 64, the default build).
# 4. bench/gpu_compare.sh with the fastest build against eager, every row, then
#    torch.compile on the CNN at 64.
# 5. Where time is left, the per-op profiles of the residual model and VGG.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=480 skip=
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    --skip) skip=",$2,"; shift 2 ;;
    *) echo "usage: $0 [--budget SECONDS] [--skip conv,patches,precision,wgpu,profile]" >&2; exit 2 ;;
  esac
done
skips() { [[ "$skip" == *",$1,"* ]]; }
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

# 1. The builds side by side, and eager, on the tutorial CNN at 64 and the residual model;
#    the fastest build measures the rest, with the faster convolution form.
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
# One engine run: build label model batch [ENV=VALUE | spec.path=VALUE ...] (an upper-case
# name is an environment variable, a lower-case one a spec override); the JSON and log
# land in $R.
engine_row() {
  local name=$1 label=$2 model=$3 batch=$4; shift 4
  local envs=() sets=() a
  for a in "$@"; do
    if [[ "$a" == [a-z]* ]]; then sets+=(--set "$a"); else envs+=("$a"); fi
  done
  local steps=300 warmup=50; [ "$model:$batch" = cnn:64 ] && { steps=1000; warmup=100; }
  [ "$model" = vgg ] && { steps=100; warmup=20; }
  local limit=$(( $(left) / 3 )); [ "$limit" -gt 90 ] && limit=90
  [ "$limit" -lt 25 ] && { say "$label: skipped, $(left) s left"; return; }
  env "${envs[@]}" timeout -k 5 "$limit" python3 bench/engine_cnn.py --engine "$G/$name" --device cuda:0 --model "$model" \
    --batch-size "$batch" --warmup "$warmup" --steps "$steps" --no-cpu-check --log "$R/$label.log" \
    --set run_config.save_checkpoints_steps=1000000 "${sets[@]}" >"$R/$label.json" 2>>"$R/$label.log"
  say "$(report "$name cuda:0, $model $batch${*:+ ($*)}" "$R/$label.json") [$(grep -o 'device reads: [^,)]*' "$R/$label.log" | tail -1)] $(grep -o -m1 'replayed as one captured graph of [0-9]* ops\|cannot be captured ([^)]*\|no step graph ([^)]*' "$R/$label.log")"
  # The loss at the last logged step, to set the builds' trajectories side by side.
  say "  $(grep -o 'loss = [^,]*, step = [0-9]*' "$R/$label.log" | tail -1)"
}
best=${builds[0]} best_rate=0
for name in "${builds[@]}"; do
  engine_row "$name" "$name-cnn64" cnn 64
  r=$(rate "$R/$name-cnn64.json"); [ "$r" -gt "$best_rate" ] && { best=$name; best_rate=$r; }
done
# The residual model's step checks 40 values: the builds again where checks weigh most.
for name in "${builds[@]}"; do engine_row "$name" "$name-residual256" residual 256; done
say "fastest build on cnn 64: $best"
# One step at a time (ENGINE_PIPELINE=off: the next step queued only after this one's end
# was read and its hooks ran) against the default's step ahead, on the launch-bound rows.
for row in cnn:64 residual:256; do
  m=${row%:*} b=${row#*:}
  engine_row "$best" "seq-$m$b" "$m" "$b" ENGINE_PIPELINE=off
done
# The convolution forms: the default measures each pass's forms at the first step and keeps
# the fastest (ENGINE_CONV_KERNELS=measure); against it, the fixed rule fitted on the H200
# (rules: a GEMM below 2^18 outputs or from 256 products per output), every pass a GEMM
# (gemm) and cubek's implicit GEMM wherever it takes the pass (implicit), on the rows with
# large convolutions. The forms each pass measured go to forms-ROW.txt (a 3-step run's
# debug lines). The faster of measure and rules measures the table.
conv_env=()
skips conv ||
for row in residual:256 vgg:128 resnet:128 cnn:512; do
  m=${row%:*} b=${row#*:}
  [ -f "$R/$best-$m$b.json" ] || engine_row "$best" "$best-$m$b" "$m" "$b"
  for form in rules implicit gemm; do engine_row "$best" "$form-$m$b" "$m" "$b" ENGINE_CONV_KERNELS=$form; done
  [ "$(left)" -gt 60 ] && ENGINE_LOG=debug timeout -k 5 40 "$G/$best" run "specs/fashion_mnist_$m.ron" --device cuda:0 \
    --model-dir "/tmp/gpu_session_forms_$m" --max-steps 3 --set eval_input=None --set "train_input.batch_size=$b" 2>&1 |
    grep ' → \|not used\|measured in this step' >"$R/forms-$m$b.txt"
  say "  forms measured, $m $b: $(grep -o 'passes measured in this step, [0-9.]* s\|→ [a-z]*' "$R/forms-$m$b.txt" | sort | uniq -c | tr -s ' \n' ' ')"
done
rules_wins=0
for row in residual:256 vgg:128 resnet:128 cnn:512; do
  m=${row%:*} b=${row#*:}
  [ -f "$R/rules-$m$b.json" ] && [ "$(rate "$R/rules-$m$b.json")" -gt "$(rate "$R/$best-$m$b.json")" ] && rules_wins=$((rules_wins + 1))
done
[ "$rules_wins" -ge 3 ] && conv_env=(ENGINE_CONV_KERNELS=rules)
skips conv || say "the fixed rule was faster than measuring on $rules_wins of 4 rows; the table runs with: ${conv_env[*]:-the default}"

# The convolutions' patch matrices built from burn's ops (ENGINE_CONV_PATCHES=ops) against
# the one kernel the default runs, on the rows whose steps are mostly convolutions.
skips patches ||
for row in resnet:128 vgg:128 residual:256; do
  m=${row%:*} b=${row#*:}
  [ -f "$R/$best-$m$b.json" ] || engine_row "$best" "$best-$m$b" "$m" "$b" "${conv_env[@]}"
  engine_row "$best" "ops-$m$b" "$m" "$b" ENGINE_CONV_PATCHES=ops "${conv_env[@]}"
done
# The fused elementwise programs (optimizer updates, skip adds) op by op
# (ENGINE_ELEMENTWISE=ops) against the default's one generated kernel each.
skips patches ||
for row in resnet:128 cnn:512; do
  m=${row%:*} b=${row#*:}
  [ -f "$R/$best-$m$b.json" ] || engine_row "$best" "$best-$m$b" "$m" "$b" "${conv_env[@]}"
  engine_row "$best" "ew-$m$b" "$m" "$b" ENGINE_ELEMENTWISE=ops "${conv_env[@]}"
done
# Mixed precision (bfloat16 products and convolutions, f32 everything else) against f32 on
# the rows with the most arithmetic, then the tutorial CNN's full run in it: its accuracy.
skips precision ||
for row in resnet:128 vgg:128 cnn:512; do
  m=${row%:*} b=${row#*:}
  [ -f "$R/$best-$m$b.json" ] || engine_row "$best" "$best-$m$b" "$m" "$b" "${conv_env[@]}"
  engine_row "$best" "bf16-$m$b" "$m" "$b" run_config.precision=Bf16Mixed "${conv_env[@]}"
done
if ! skips precision && [ "$(left)" -gt 120 ]; then
  env "${conv_env[@]}" timeout -k 5 90 "$G/$best" run specs/fashion_mnist_cnn.ron --device cuda:0 \
    --model-dir /tmp/gpu_session_bf16 --set run_config.precision=Bf16Mixed >"$R/bf16-accuracy.log" 2>&1
  say "$best cuda:0, tutorial CNN in Bf16Mixed, full run (exit $?): $(grep -o 'accuracy = [0-9.]*.*global_step = [0-9]*' "$R/bf16-accuracy.log" | tail -1)"
fi

# 2. wgpu:0 once, with the loader's complaints; where it starts, the CNN at 64 with the
#    default submission size and with a whole step per submission.
wgpu_rc=1
if ! skips wgpu; then
  VK_LOADER_DEBUG=error,warn timeout -k 5 60 "$G/${builds[0]}" run specs/fashion_mnist_cnn.ron --device wgpu:0 \
    --max-steps 3 --model-dir /tmp/gpu_session_wgpu --set eval_input=None >"$R/wgpu.log" 2>&1
  wgpu_rc=$?
  say "wgpu:0 exit $wgpu_rc: $(grep -m1 -E '^error|wgpu:0 is' "$R/wgpu.log")"
fi
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
  env "${conv_env[@]}" timeout -k 5 60 "$G/$1" run "specs/fashion_mnist_$3.ron" --device cuda:0 --max-steps 23 --model-dir "$d" \
    --set "train_input.batch_size=$4" --set eval_input=None --set run_config.log_step_count_steps=10 \
    --set 'train_spec.hooks=[Profiler(first_step: 20, last_step: 21)]' >"$R/prof-$2.log" 2>&1
  say "== per-op profile, $1 cuda:0, $3 at $4 (exit $?)"
  grep -h "examples/sec\|device reads" "$R/prof-$2.log" | tail -2 >>"$R/summary.txt"
  python3 bench/timeline_summary.py "$d/timeline-21.json" --top 16 >>"$R/summary.txt" 2>&1
  cp "$d/timeline-21.json" "$R/timeline-$2.json" 2>/dev/null
}
# The launch-bound row first: how much of its step the device is busy.
skips profile || { [ "$(left)" -gt 150 ] && prof "${builds[0]}" cnn64 cnn 64; }
skips profile || { [ "$(left)" -gt 150 ] && prof "${builds[0]}" cnn512 cnn 512; }

# 4. The table in what is left: the fastest build and eager on every row, then
#    torch.compile (and wgpu:0, where it started) on the launch-bound row.
if [ "$(left)" -gt 60 ]; then
  env "${conv_env[@]}" timeout -k 5 "$(( $(left) - 110 ))" bench/gpu_compare.sh --engine "$G/$best" --out "$R/table" --limit 60 \
    --runners engine-cuda,torch-eager >/dev/null 2>>"$R/summary.txt"
  runners=torch-compile; [ $wgpu_rc -eq 0 ] && runners=engine-wgpu,torch-compile
  env "${conv_env[@]}" timeout -k 5 "$(left)" bench/gpu_compare.sh --engine "$G/$best" --out "$R/table" --limit 60 \
    --rows cnn:64 --runners "$runners" >/dev/null 2>>"$R/summary.txt"
  python3 bench/gpu_table.py "$R/table" >>"$R/summary.txt" 2>&1
fi

# 5. Where time is left, the per-op profiles of the larger models.
skips profile || { [ "$(left)" -gt 70 ] && prof "${builds[0]}" res256 residual 256; }
skips profile || { [ "$(left)" -gt 70 ] && prof "${builds[0]}" vgg128 vgg 128; }
cat "$R/summary.txt"
