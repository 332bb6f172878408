#!/usr/bin/env bash
# Fourth call: which kernels a replayed ResNet and VGG step spends its device time in (Nsight
# Systems where the toolkit has it), and the ViT and MLP specs replayed on cuda:0.
set -uo pipefail
cd "$(dirname "$0")/../../.."
G=bench/.build/gpu R=$OUT/r; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { mkdir -p "$data" && cp $G/fmnist/* "$data/"; }
xz -d -k -f $G/engine.xz; chmod +x $G/engine
S=$OUT/summary.txt
{ ls /usr/local/cuda-13.0/bin 2>&1 | tr '\n' ' '; echo; ls -d /opt/nvidia/* /usr/local/cuda*/nsight* 2>&1 | tr '\n' ' '; echo; command -v nsys ncu; } >>$S
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
run() { # spec batch steps
  $G/engine run specs/fashion_mnist_$1.ron --device cuda:0 --max-steps $3 --model-dir /tmp/m-$1-$RANDOM \
    --set train_input.batch_size=$2 --set eval_input=None --set run_config.log_step_count_steps=20 \
    --set run_config.save_checkpoints_steps=100000
}
for spec in vit mlp; do
  timeout -k 5 60 bash -c "$(declare -f run); G=$G; run $spec 128 200" >$R/$spec.log 2>&1
  echo "$spec: exit $? $(grep -o -m1 'replayed as one captured graph of [0-9]* ops\|cannot be captured ([^)]*' $R/$spec.log) $(grep -o 'examples/sec: [0-9.]*' $R/$spec.log | tail -1) $(grep -o 'loss = [^,]*, step = [0-9]*' $R/$spec.log | tail -1)" >>$S
done
if [ -n "$NSYS" ]; then
  for spec in resnet:128 vgg:128; do
    m=${spec%:*} b=${spec#*:}
    timeout -k 5 100 $NSYS profile -t cuda -o /tmp/ns-$m --force-overwrite true bash -c "$(declare -f run); G=$G; run $m $b 60" >$R/ns-$m.log 2>&1
    echo "== $m $b: kernels by device time (nsys, 60 steps)" >>$S
    timeout -k 5 60 $NSYS stats -q -r cuda_gpu_kern_sum -f csv /tmp/ns-$m.nsys-rep 2>>$R/ns-$m.log | cut -c1-220 | head -32 >>$S
  done
else
  echo "no nsys" >>$S
fi
cat $S
