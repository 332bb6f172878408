#!/usr/bin/env bash
# Third call: the table with staged batch-norm reductions (engine) against eager and torch.compile,
# the step-graph build before them (engine-graph) on the ResNet, and one profiled ResNet step.
set -uo pipefail
cd "$(dirname "$0")/../../.."
G=bench/.build/gpu R=$OUT/r; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { mkdir -p "$data" && cp $G/fmnist/* "$data/"; }
for b in engine engine-graph; do xz -d -k -f $G/$b.xz; chmod +x $G/$b; done
rate() { python3 - "$1" "$2" <<'PY' 2>&1
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}: {r['examples_per_s']:,.0f} examples/s, first step {r['process_start_to_first_step_s']:.1f} s")
PY
}
timeout -k 5 60 python3 bench/engine_cnn.py --engine $G/engine-graph --device cuda:0 --model resnet --batch-size 128 \
  --warmup 30 --steps 200 --no-cpu-check --log $R/graph-resnet.log --set run_config.save_checkpoints_steps=1000000 >$R/graph-resnet.json 2>>$R/graph-resnet.log
rate $R/graph-resnet.json "engine-graph resnet 128" | tee -a $OUT/summary.txt
grep -o 'loss = [^,]*, step = [0-9]*' $R/graph-resnet.log | tail -1 | tee -a $OUT/summary.txt
timeout -k 5 280 bench/gpu_compare.sh --engine $G/engine --out $R/table --limit 60 --runners engine-cuda,torch-eager >/dev/null 2>>$OUT/summary.txt
timeout -k 5 60 bench/gpu_compare.sh --engine $G/engine --out $R/table --limit 60 --rows cnn:64 --runners torch-compile >/dev/null 2>>$OUT/summary.txt
python3 bench/gpu_table.py $R/table >>$OUT/summary.txt 2>&1
grep -o 'loss = [^,]*, step = [0-9]*' $R/table/resnet-128-engine-cuda-0.log | tail -1 | tee -a $OUT/summary.txt
grep -h -o 'replayed as one captured graph of [0-9]* ops\|cannot be captured ([^)]*' $R/table/*engine*.log | sort | uniq -c >>$OUT/summary.txt
d=/tmp/prof-resnet
timeout -k 5 60 $G/engine run specs/fashion_mnist_resnet.ron --device cuda:0 --max-steps 23 --model-dir $d \
  --set train_input.batch_size=128 --set eval_input=None --set run_config.log_step_count_steps=10 \
  --set 'train_spec.hooks=[Profiler(first_step: 20, last_step: 21)]' >$R/prof-resnet.log 2>&1
echo "== per-op profile, resnet 128 (exit $?)" >>$OUT/summary.txt
python3 bench/timeline_summary.py "$d/timeline-21.json" --top 14 >>$OUT/summary.txt 2>&1
tar -C $R -cJf $OUT/table.tar.xz table
cat $OUT/summary.txt
