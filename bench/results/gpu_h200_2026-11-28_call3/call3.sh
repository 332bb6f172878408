#!/usr/bin/env bash
# Third call: convolution form by products per output (GEMM_MIN_DEPTH) against the previous rule.
set -uo pipefail
cd "$(dirname "$0")/../../.."
G=bench/.build/gpu R=$OUT/r; mkdir -p $R
start=$SECONDS; budget=${1:-220}
left() { echo $((budget - (SECONDS - start))); }
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { mkdir -p "$data" && cp $G/fmnist/* "$data/"; }
for b in engine engine-probes; do xz -d -k -f $G/$b.xz; chmod +x $G/$b; done
row() { # label bin model batch [env]
  local label=$1 bin=$2 m=$3 b=$4; shift 4
  local steps=300 warm=50; [ $m = vgg ] && { steps=100; warm=20; }
  [ "$(left)" -lt 20 ] && { echo "$label skipped" | tee -a $OUT/summary.txt; return; }
  env "$@" timeout -k 5 40 python3 bench/engine_cnn.py --engine $G/$bin --device cuda:0 --model $m --batch-size $b \
    --warmup $warm --steps $steps --no-cpu-check --log $R/$label.log --set run_config.save_checkpoints_steps=1000000 >$R/$label.json 2>>$R/$label.log
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(f"{sys.argv[2]}: {r[\"examples_per_s\"]:,.0f} examples/s, first step {r[\"process_start_to_first_step_s\"]:.1f} s")' $R/$label.json $label 2>/dev/null | tee -a $OUT/summary.txt || echo "$label: failed" | tee -a $OUT/summary.txt
}
for r in vgg:128 cnn:512 residual:256 resnet:128; do
  m=${r%:*} b=${r#*:}
  row "$m$b-previous" engine-probes $m $b
  row "$m$b-depth512" engine $m $b
  row "$m$b-depth256" engine $m $b ENGINE_CONV_GEMM_DEPTH=256
done
[ "$(left)" -gt 20 ] && timeout -k 5 30 python3 bench/torch_gpu.py --model vgg --mode eager --batch-size 128 --steps 100 --warmup 20 --log-every 20 >$R/eager-vgg.json 2>$R/eager-vgg.log && python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(f"eager vgg128: {r[\"examples_per_s\"]:,.0f} examples/s")' $R/eager-vgg.json | tee -a $OUT/summary.txt
true
