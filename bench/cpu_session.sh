#!/usr/bin/env bash
# Issue 41's measurements on one CPU, as one command: what a session on a machine kind not
# measured lately (an Intel Xeon with AVX-512, last at d46946d) runs first, while nothing
# else runs (a build beside it distorts every figure on 2 cores).
#
#   bench/cpu_session.sh [--engine BIN] [--models "cnn mlp residual resnet vgg vit"]
#                        [--threads "1 2"] [--reps 3] [--ab-reps 4] [--quick] [--tag NAME]
#
# 1. The machine: lscpu's model and caches, the engine's own view of it (`engine plan`'s
#    `cpu:` line: the kernels chosen for it and the thread choice).
# 2. Large f32 GEMMs and the MLP's shapes (`gemm_rate`, built if missing) beside
#    OpenBLAS's peak on one pinned core (`bench/gemm_peak.py`): item 2's 80 %.
# 3. `bench/compare.py` for every model at every thread count, TensorFlow interleaved:
#    item 1's table.
# 4. The optional fusions against the default with one binary, alternated runs of
#    `bench/engine_cnn.py` at one thread: ENGINE_FUSE_BN_RELU=1 on the ResNet,
#    ENGINE_FUSE_INPUT_GRAD=1 on the residual model and the ResNet (both measured mixed
#    on the Zen 5; both cut memory traffic, which costs more on the Intel VM).
#
# --quick is a smoke run of the script itself (one repetition, short runs, two models).
# Everything lands in bench/results/cpu_session_<commit>_<tag>/: summary.md (the tables
# to copy into BENCHMARKS.md), the compare.py tables, and the raw logs.
set -uo pipefail
cd "$(dirname "$0")/.."
engine=target/release/engine models="cnn mlp residual resnet vgg vit" threads="1 2"
reps=3 ab_reps=4 quick= tag=
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) engine=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --ab-reps) ab_reps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --tag) tag=$2; shift 2 ;;
    *) echo "usage: $0 [--engine BIN] [--models LIST] [--threads LIST] [--reps N] [--ab-reps N] [--quick] [--tag NAME]" >&2; exit 2 ;;
  esac
done
[ -x "$engine" ] || { echo "no engine binary at $engine: cargo build --release -p engine-cli" >&2; exit 1; }
[ -x bench/.venv-tf/bin/python ] || { echo "no TensorFlow venv: bench/setup.sh" >&2; exit 1; }
if [ -z "$tag" ]; then
  vendor=$(grep -m1 '^vendor_id' /proc/cpuinfo | awk '{print $3}')
  family=$(grep -m1 '^cpu family' /proc/cpuinfo | awk '{print $4}')
  model=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | awk '{print $3}')
  case "$vendor" in
    GenuineIntel) tag=intel_f${family}m$model ;;
    AuthenticAMD) tag=amd_f${family}m$model ;;
    *) tag=cpu ;;
  esac
fi
compare_args=() engine_args=() gemm_sizes="1024 2048 128x256x784 784x256x128"
if [ -n "$quick" ]; then
  models="cnn mlp" reps=1 ab_reps=1 gemm_sizes=512
  compare_args=(--steps 100 --warmup 20 --no-gemm-peak)
  engine_args=(--steps 100 --warmup 20)
fi
sha=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench/results' || echo -dirty)
R=bench/results/cpu_session_${sha}_$tag
mkdir -p "$R"
S=$R/summary.md
say() { echo "$*" | tee -a "$S"; }
: > "$S"

say "# Issue 41 on $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), engine at $sha"
say ""
say "Started $(date -u '+%Y-%m-%d %H:%M UTC'). \`lscpu\`:"
say '```'
lscpu | grep -E '^(Model name|CPU family|Model|Thread|Core|CPU\(s\)|L1d|L2|L3)' | tee -a "$S"
say "AVX-512F: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
say '```'
plan_cpu=$("$engine" plan specs/fashion_mnist_cnn.ron 2>&1 | grep -m2 -E 'cpu:|threads' || true)
say ""
say "The engine's view (\`engine plan\`):"
say '```'
say "$plan_cpu"
say '```'

say ""
say "## Large GEMMs against OpenBLAS, one pinned core"
gemm=target/release/examples/gemm_rate
[ -x "$gemm" ] || cargo build --release -p engine-runtime --example gemm_rate >"$R/gemm_build.log" 2>&1
say '```'
for i in 1 2; do
  python3 bench/quiet.py --wait 60 >/dev/null 2>&1
  RAYON_NUM_THREADS=1 taskset -c 0 "$gemm" $gemm_sizes 2>&1 | tee -a "$S"
  [ -n "$quick" ] && break
  bench/.venv-tf/bin/python bench/gemm_peak.py --threads 1 2>>"$R/gemm_peak.log" | python3 -c 'import json, sys
d = json.load(sys.stdin)
print("OpenBLAS ({}) 2048^3, one pinned core: best {:.1f}, median {:.1f} GFLOP/s".format(d.get("corename"), d["gflops_best"], d["gflops_median"]))' 2>&1 | tee -a "$S"
done
say '```'
say ""
say "A weight gradient's product (the ViT's \`xᵀ · dy\` over 6,272 tokens) at one and two threads: the"
say "\`gemm\` crate shares output blocks among threads, and this product has few (1.37 and 1.22 ms on the"
say "Intel VM at d46946d; 0.52 and 0.41–0.50 ms on the Zen 5 on 2026-12-07, where a split along its sum ran"
say "0.33–0.35 at two threads but did not move the ViT's step). The journal's \"split along its sum\" note"
say "says what to build if the ViT's two threads gain little on this machine."
say '```'
for t in 1 2; do
  python3 bench/quiet.py --wait 60 >/dev/null 2>&1
  echo "threads $t: $(RAYON_NUM_THREADS=$t "$gemm" 64x128x6272 2>&1 | tail -1)" | tee -a "$S"
done
say '```'

say ""
say "## Each model against TensorFlow 2.15 (compare.py, threads: $threads)"
for m in $models; do
  python3 bench/compare.py --model "$m" --no-build --engine "$engine" --reps "$reps" \
    --threads $threads --wait-quiet 30 --out "$R" "${compare_args[@]}" >"$R/${m}_compare.log" 2>&1 \
    || say "compare.py --model $m failed: see $R/${m}_compare.log"
  [ -f "$R/${m}_compare.md" ] && { say ""; tee -a "$S" <"$R/${m}_compare.md"; }
done

# Examples/s of `engine_cnn.py` at one pinned thread, `env` set for the second binary.
rate() {
  local model=$1; shift
  env "$@" python3 bench/engine_cnn.py --engine "$engine" --model "$model" --threads 1 --no-cpu-check "${engine_args[@]}" 2>>"$R/ab.log" \
    | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["examples_per_s"]))' 2>>"$R/ab.log" || echo 0
}
ab() {
  local model=$1 var=$2 base=() with=() ratios=()
  for _ in $(seq "$ab_reps"); do
    python3 bench/quiet.py --wait 30 >/dev/null 2>&1
    local a b
    a=$(rate "$model" ENGINE_NONE=1) b=$(rate "$model" "$var=1")
    base+=("$a") with+=("$b")
    ratios+=("$(python3 -c "print(f'{$b / $a - 1:+.1%}' if $a else 'n/a')")")
  done
  say "| $model | $var=1 | ${base[*]} | ${with[*]} | ${ratios[*]} |"
}
say ""
say "## Optional fusions against the default, one binary, alternated (examples/s, one thread)"
say ""
say "| model | lever | default | with the lever | each pair |"
say "|---|---|---|---|---|"
for m in $models; do
  case "$m" in
    resnet) ab resnet ENGINE_FUSE_BN_RELU; ab resnet ENGINE_FUSE_INPUT_GRAD ;;
    residual) ab residual ENGINE_FUSE_INPUT_GRAD ;;
  esac
done
[ -n "$quick" ] && ab cnn ENGINE_FUSE_INPUT_GRAD
say ""
say "Ended $(date -u '+%Y-%m-%d %H:%M UTC'). Raw tables and logs: \`$R\`."
