#!/usr/bin/env bash
# Second call: the convolution forms under step graphs (ResNet, VGG), then one profiled step of each.
set -uo pipefail
cd "$(dirname "$0")/../../.."
G=bench/.build/gpu R=$OUT/r; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { mkdir -p "$data" && cp $G/fmnist/* "$data/"; }
xz -d -k -f $G/engine.xz; chmod +x $G/engine
row() { # label model batch [env]
  local label=$1 m=$2 b=$3; shift 3
  local steps=200 warm=30; [ $m = vgg ] && { steps=100; warm=20; }
  env "$@" timeout -k 5 50 python3 bench/engine_cnn.py --engine $G/engine --device cuda:0 --model $m --batch-size $b \
    --warmup $warm --steps $steps --no-cpu-check --log $R/$label.log --set run_config.save_checkpoints_steps=1000000 >$R/$label.json 2>>$R/$label.log
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(f"{sys.argv[2]}: {r[\"examples_per_s\"]:,.0f} examples/s")' $R/$label.json $label 2>&1 | tee -a $OUT/summary.txt
}
row resnet-default resnet 128
row resnet-gemm resnet 128 ENGINE_CONV_KERNELS=gemm
row vgg-default vgg 128
row vgg-gemm vgg 128 ENGINE_CONV_KERNELS=gemm
prof() { # label spec batch [env]
  local label=$1 spec=$2 b=$3; shift 3; local d=/tmp/prof-$label
  env "$@" timeout -k 5 60 $G/engine run specs/fashion_mnist_$spec.ron --device cuda:0 --max-steps 23 --model-dir $d \
    --set train_input.batch_size=$b --set eval_input=None --set run_config.log_step_count_steps=10 \
    --set 'train_spec.hooks=[Profiler(first_step: 20, last_step: 21)]' >$R/prof-$label.log 2>&1
  echo "== per-op profile, $label (exit $?)" >>$OUT/summary.txt
  python3 bench/timeline_summary.py "$d/timeline-21.json" --top 22 >>$OUT/summary.txt 2>&1
}
prof resnet128 resnet 128
prof vgg128 vgg 128
cat $OUT/summary.txt
