#!/usr/bin/env bash
# Fifth call: the ResNet's kernels by device time, from Nsight Compute (no nsys in the container):
# one step's launches (ENGINE_STEP_GRAPH=off, so each kernel is its own launch), each timed alone.
set -uo pipefail
cd "$(dirname "$0")/../../.."
G=bench/.build/gpu R=$OUT/r; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { mkdir -p "$data" && cp $G/fmnist/* "$data/"; }
xz -d -k -f $G/engine.xz; chmod +x $G/engine
S=$OUT/summary.txt
ENGINE_STEP_GRAPH=off timeout -k 5 150 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv \
  --launch-skip ${SKIP:-4000} --launch-count ${COUNT:-1600} --log-file $R/ncu.csv \
  $G/engine run specs/fashion_mnist_resnet.ron --device cuda:0 --max-steps 5 --model-dir /tmp/ncu-m \
  --set train_input.batch_size=128 --set eval_input=None --set run_config.log_step_count_steps=1 >$R/run.log 2>&1
echo "ncu exit $?; $(grep -c gpu__time_duration $R/ncu.csv) kernels timed" >>$S
python3 - $R/ncu.csv >>$S 2>&1 <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; rows = rows[1:]
name = head.index("Kernel Name"); val = head.index("Metric Value"); unit = head.index("Metric Unit")
tot = collections.Counter(); cnt = collections.Counter()
for r in rows:
    v = float(r[val].replace(",", ""))
    v *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(r[unit], 1.0)
    k = r[name].split("(")[0].split("<")[0][:70]
    tot[k] += v; cnt[k] += 1
all_us = sum(tot.values())
print(f"{len(rows)} kernels, {all_us/1000:.2f} ms in all")
for k, v in tot.most_common(25):
    print(f"{v/1000:8.3f} ms {100*v/all_us:5.1f}% {cnt[k]:5d}x  {k}")
PY
cat $S
